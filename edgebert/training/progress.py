"""Progress of a run: a rich progress bar on a terminal; plain log lines (one per logging step and per
evaluation) when the output is not a terminal or the bar is switched off (``progress=False``,
``--no-progress``). Only the main process prints (``enabled``)."""

from __future__ import annotations

from typing import Any

from edgebert.training.config import TrainConfig


class Progress:
    """A rich progress bar on a terminal when ``cfg.progress``; plain log lines otherwise (under nohup,
    in a pipe, with ``--no-progress``). ``enabled``: this process prints (the main one)."""

    def __init__(self, console, cfg: TrainConfig, enabled: bool, start: int):
        self.console, self.cfg, self.enabled, self.start = console, cfg, enabled, start
        self.bar = None
        if enabled and cfg.progress and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn("step"), MofNCompleteColumn(), BarColumn(),
                           TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                           TimeRemainingColumn(), console=console, transient=False)
            self.task_id = self.bar.add_task("train", total=cfg.max_steps, completed=start, info="")

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def say(self, line: str) -> None:
        """A line above the bar (or a plain line without one), from the main process only."""
        if self.enabled:
            (self.bar.console if self.bar is not None else self.console).print(line, highlight=False, soft_wrap=True)

    def started(self, data: str, steps: int, batch_size: int, first: int) -> None:
        """The start line, before the first step: what is trained on, how many steps."""
        where = f", from step {first}" if first else ""
        self.say(f"training on {data}: {steps} steps of batch {batch_size}{where}; ETA after the first step")

    def first_step(self, step: int, seconds: float, end: int) -> None:
        """The ETA from the first step's time (the bar shows its own); the held-out evaluations it will run are
        timed at the first one (``first_eval``), which gives the ETA again with them."""
        self.step_seconds = seconds
        evals = evaluations_left(self.cfg, step, end)
        if self.bar is None:
            left = seconds * (end - step)
            later = (f"; {evals} held-out evaluation{'s' if evals != 1 else ''} to add (timed at the first, "
                     "then the ETA again)") if evals else ""
            self.say(f"step {step}/{self.cfg.max_steps} took {seconds:.2f} s: ETA {_duration(left)} "
                     f"for the remaining {end - step} steps{later}")

    def first_eval(self, step: int, seconds: float, end: int) -> None:
        """The ETA again once an evaluation has been timed: the steps left and the evaluations left, both."""
        per_step = getattr(self, "step_seconds", None)
        if per_step is None:                 # resumed past its first step here: nothing timed to add it to
            return
        evals, steps = evaluations_left(self.cfg, step, end), end - step
        left = per_step * steps + seconds * evals
        self.say(f"evaluation at step {step} took {seconds:.1f} s: ETA {_duration(left)} for the remaining {steps} "
                 f"steps and {evals} evaluation{'s' if evals != 1 else ''}")

    def update(self, step: int, record: dict[str, Any] | None) -> None:
        record = record or {}
        train_info = (f"loss {record['loss']:.4f}  lr {record['lr']:.2e}  "
                      f"{record['tokens_per_s']:.0f} tok/s") if "loss" in record else None
        eval_info = "  ".join(f"{k} {v:.4f}" for k, v in record.items()
                              if k.startswith("eval_") and isinstance(v, float))
        if self.bar is not None:
            self.bar.update(self.task_id, completed=step,
                            **({"info": train_info} if train_info else {}))
            if eval_info:  # printed above the bar, which keeps to one terminal line
                self.bar.console.print(f"step {step}  {eval_info}", highlight=False, soft_wrap=True)
        elif self.enabled and (train_info or eval_info):
            line = "  ".join(x for x in (train_info, eval_info) if x)
            self.console.print(f"step {step}/{self.cfg.max_steps}  {line}", highlight=False,
                               soft_wrap=True)


def evaluations_left(cfg: TrainConfig, step: int, end: int) -> int:
    """The held-out evaluations a run at ``step`` still runs before ``end``: every ``eval_every`` steps, and at
    ``max_steps`` (as ``Trainer.fit`` runs them)."""
    every = cfg.eval_every or 0
    count = (end // every - step // every) if every else 0
    if end == cfg.max_steps and (not every or end % every) and end > step:
        count += 1
    return max(count, 0)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"
