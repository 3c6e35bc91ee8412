"""The progress bar ``wait(progress=True)`` shows: tqdm's, in a terminal or a notebook.

It only draws: it learns the job's state from the events ``wait`` hands it.
"""

from __future__ import annotations

from typing import Any

from ._generated.fragments import JobFields


class ProgressBar:
    """Succeeded runs out of the job's completions, with its phase beside them."""

    def __init__(self, job: JobFields) -> None:
        # Imported here, not with the package: in a Jupyter kernel without ipywidgets,
        # importing tqdm.auto warns, and only ``wait(progress=True)`` draws a bar.
        from tqdm.auto import tqdm

        total = job.progress.total if job.progress and job.progress.total else job.spec.completions
        self._bar: Any = tqdm(total=total, desc=job.name or job.id, unit="run", leave=True)
        self.update(job)

    def update(self, job: JobFields) -> None:
        done = job.progress.succeeded if job.progress else 0
        self._bar.n = done
        self._bar.set_postfix_str(job.phase.value, refresh=False)
        self._bar.refresh()

    def close(self, job: JobFields) -> None:
        self.update(job)
        self._bar.close()
