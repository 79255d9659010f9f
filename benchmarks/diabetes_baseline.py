"""The exact least-squares baseline for experiment=diabetes_regression: scikit-learn's
LinearRegression on the same training rows (gradexp's split and scaling), scored on the same
validation and test rows. The README compares the preset's linear model with it.

    python benchmarks/diabetes_baseline.py
"""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from sklearn.linear_model import LinearRegression
from sklearn.metrics import mean_squared_error, r2_score

from gradexp.app import register_experiments, resource_dir
from gradexp.data import load_data
from gradexp.schema import register_schemas


def main() -> None:
    register_schemas()
    register_experiments()
    with initialize_config_dir(config_dir=str(resource_dir("conf")), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=diabetes_regression"])
    data = load_data(cfg.data)
    fit = LinearRegression().fit(data.x, data.y)
    for split in ("val", "test"):
        rows = getattr(data, split)
        predicted = fit.predict(rows.x)
        print(f"{split}: mse {mean_squared_error(rows.y, predicted):,.0f}  "
              f"r2 {r2_score(rows.y, predicted):.3f}  ({len(rows)} rows; {len(data.x)} to fit)")


if __name__ == "__main__":
    main()
