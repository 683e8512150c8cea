"""Reminders and recurring tasks (R-SCHED-1): schedules, their recurrence, and their workflow."""

from agentd.schedule.create import ScheduleRequest, create, summary
from agentd.schedule.recurrence import Recurrence, ScheduleError, When
from agentd.schedule.store import OCCURRENCE_WORKFLOW, Schedule

__all__ = [
    "OCCURRENCE_WORKFLOW",
    "Recurrence",
    "Schedule",
    "ScheduleError",
    "ScheduleRequest",
    "When",
    "create",
    "summary",
]
