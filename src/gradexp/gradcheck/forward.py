"""Forward mode (``modes=("rev", "fwd")``): JVPs from tf.autodiff.ForwardAccumulator against the
reverse-mode VJPs and against finite differences.

Per input and probe, with a Gaussian direction u and a random cotangent v: vᵀ(Ju) from the
accumulator, (vᵀJ)·u from the reverse-mode VJP, and the central differences vᵀ(f(x + hu) -
f(x - hu)) / 2h at steps h and 2h (their gap measures the finite-difference error, which widens
the tolerance as in probe.py). An entry ``"<name> (fwd)"`` (``mode="fwd"``) fails if the JVPs
disagree with either.

What TensorFlow does with a ``tf.custom_gradient`` function in forward mode (tests/
test_second_order.py pins it): called eagerly, the accumulator differentiates the function's
forward ops and ignores the custom backward (it falls back on the backward only where those ops
have no derivative, e.g. a forward in numpy), so a wrong backward shows as JVPs that agree with
finite differences and disagree with reverse mode; inside a ``tf.function``, forward mode is
derived from the backward (by transposing it), so the JVPs agree with reverse mode and both
disagree with finite differences. Either way a wrong backward fails the entry, and its note says
which pair disagreed. An op with no forward-mode derivative (a JVP of None: tf.numpy_function,
an op without a gradient) or one the accumulator refuses leaves the entry unchecked, with a note.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradexp.gradcheck.entries import _new_entry
from gradexp.gradcheck.options import _EPS, _cotangent, _Options, _rounding
from gradexp.gradcheck.report import GradCheckEntry

MODES = ("rev", "fwd")


def check_modes(modes: Any) -> tuple[str, ...]:
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    if not modes or any(m not in MODES for m in modes) or "rev" not in modes:
        raise ValueError(f"modes={modes!r}: expected ('rev',) or ('rev', 'fwd') (reverse mode is "
                         "the main check; 'fwd' adds forward-mode JVPs)")
    return tuple(m for m in MODES if m in modes)


def forward_entries(target: Any, opts: _Options) -> list[GradCheckEntry]:
    """One ``mode="fwd"`` entry per input of a started target."""
    rng = np.random.default_rng([opts.seed, 3])  # a stream of its own: rev probes unchanged
    entries = []
    for i in range(len(target.values)):
        entry = _new_entry(target, i, opts)
        entry.name, entry.mode = f"{entry.name} (fwd)", "fwd"
        entries.append(entry)
        if entry.checked and target.out0.size:
            _forward_one(entry, target, i, opts, rng)
    return entries


def _forward_one(entry: GradCheckEntry, target: Any, i: int, opts: _Options,
                 rng: np.random.Generator) -> None:
    x = target.values[i]
    x64 = x.astype(np.float64).reshape(-1)
    h = entry.delta
    vs = [_cotangent(rng, target.out0.shape, target.out_numpy_dtype) for _ in range(opts.probes)]
    us = [rng.standard_normal(x.size).astype(x.dtype).astype(np.float64)
          for _ in range(opts.probes)]
    grads = target.vjps(vs)
    rows = []  # (jvp, rev, fd, fd error + rounding), normalised by |u| |v|
    for v, u, g in zip(vs, us, grads):
        v = v.reshape(-1)
        jvp = _jvp(target, i, u.reshape(x.shape).astype(x.dtype))
        if isinstance(jvp, str):
            entry.checked = False
            entry.notes.append(f"not checked in forward mode: {jvp}")
            return
        fd = [float(v @ (target.evaluate(i, (x64 + s * u).astype(x.dtype).reshape(x.shape))
                         - target.evaluate(i, (x64 - s * u).astype(x.dtype).reshape(x.shape))))
              / (2 * s) for s in (h, 2 * h)]
        rounding = 2 * float(np.abs(v) @ _rounding(target.out0.reshape(-1), _EPS[entry.precision]))
        norm = float(np.linalg.norm(u) * np.linalg.norm(v)) or 1.0
        rows.append((float(v @ jvp) / norm, float(g[i] @ u) / norm, fd[0] / norm,
                     (abs(fd[0] - fd[1]) + rounding / (2 * h)) / norm))
    _judge(entry, np.array(rows))


def _jvp(target: Any, i: int, u: np.ndarray) -> np.ndarray | str:
    """Ju (flat float64) by the forward accumulator, or why there is none."""
    import tensorflow as tf

    source = target._sources()[i]
    try:
        with tf.autodiff.ForwardAccumulator(source, tf.constant(u)) as acc:
            y = target._call()
        jvp = acc.jvp(y)
    except Exception as error:  # noqa: BLE001 - an op forward mode does not support
        first = str(error).strip().splitlines()[0][:160] if str(error).strip() else ""
        return f"the forward accumulator raised {type(error).__name__} ({first})"
    if jvp is None:
        return ("the JVP is None: it does not reach the output in forward mode, or an op on "
                "the way has no forward-mode derivative (e.g. tf.numpy_function)")
    return tf.convert_to_tensor(jvp).numpy().astype(np.float64).reshape(-1)


def _judge(entry: GradCheckEntry, rows: np.ndarray) -> None:
    """Fail the entry where the JVPs disagree with finite differences or with reverse mode."""
    jvp, rev, fd, noise = rows.T
    scale = np.maximum(np.abs(fd), float(np.sqrt(np.mean(fd**2))))
    exact = entry.atol + entry.rtol * scale  # jvp against rev: two analytical values
    to_fd = np.abs(jvp - fd) / np.maximum(exact + 2 * noise, np.finfo(float).tiny)
    to_rev = np.abs(jvp - rev) / np.maximum(exact, np.finfo(float).tiny)
    ratio = np.nan_to_num(np.maximum(to_fd, to_rev), nan=np.inf)
    diff = np.maximum(np.abs(jvp - fd), np.abs(jvp - rev))
    floor = entry.atol / entry.rtol if entry.rtol > 0 else np.finfo(float).tiny
    entry.probes = len(rows)
    entry.probes_failed = int(np.sum(~(ratio <= 1)))
    entry.error_to_tolerance = float(np.max(ratio))
    entry.max_abs_error = float(np.nan_to_num(np.max(diff), nan=np.inf))
    entry.max_rel_error = float(np.nan_to_num(np.max(diff / np.maximum(scale, floor)),
                                              nan=np.inf))
    entry.noise = float(np.max(noise)) / max(float(np.sqrt(np.mean(fd**2))), floor)
    k = int(np.argmax(ratio))
    entry.worst_analytical, entry.worst_numerical = float(jvp[k]), float(fd[k])
    entry.worst_kind = "forward-mode directional derivative v^T (J u), random u and v"
    if entry.probes_failed == 0:
        return
    entry.passed = False
    fd_bad, rev_bad = bool(np.any(~(to_fd <= 1))), bool(np.any(~(to_rev <= 1)))
    if fd_bad and not rev_bad:
        why = ("the forward-mode JVPs agree with the reverse-mode VJPs but not with finite "
               "differences: both come from the same wrong derivative (in a tf.function, "
               "TensorFlow derives forward mode from a tf.custom_gradient's backward)")
    elif rev_bad and not fd_bad:
        why = ("the forward-mode JVPs agree with finite differences but not with the "
               "reverse-mode VJPs: the backward pass is wrong (eagerly, forward mode "
               "differentiates a tf.custom_gradient's forward ops, not its backward)")
    else:
        why = "the forward-mode JVPs disagree with finite differences and with reverse mode"
    entry.notes.append(f"{why}; worst probe: JVP {jvp[k]:.6g}, reverse {rev[k]:.6g}, "
                       f"finite differences {fd[k]:.6g} (normalised by |u| |v|)")
