"""Packed sweeps (`hydra/launcher=packed`): the jobs of one shape trained together.

    plan.py      which jobs pack, in which groups, and why the others run sequentially
    program.py   the compiled program: stacked parameters, vectorized forward, our optimizer steps
    replay.py    a packed job's ordinary run, fed its packed training
    replay_processes.py   helper processes (hydra.launcher.processes): the first plans, all replay
"""
