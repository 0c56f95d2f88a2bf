"""The environment a step's command gets.

Its own module: what a step sees is decided once per attempt from what the runner was given
(attempt.py), apart from how the command is run (process.py). The runner's environment comes
stripped of every credential (isolation.step_base_env); no variable of a ready message may
set another of Heddle's own names (shared/core/step_env.py, ``passes``).
"""

from __future__ import annotations

from collections.abc import Mapping

from heddle.shared.core.step_env import passes


def step_env(
    base: dict[str, str],
    run_id: str,
    step_id: str,
    attempt: int,
    variables: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The step's environment: the runner's, already stripped of every credential
    (isolation.step_base_env), then the step's own ``variables`` (its ready message's:
    parameters, slot, static env, upstream outputs), then the run, step and attempt."""
    env = dict(base)
    if variables:
        env.update((k, v) for k, v in variables.items() if passes(k))
    env.update(HEDDLE_RUN_ID=run_id, HEDDLE_STEP_ID=step_id, HEDDLE_ATTEMPT=str(attempt))
    return env
