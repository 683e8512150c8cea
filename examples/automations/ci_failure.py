"""When CI fails, ask the owner whether to re-run it, and re-run it if they say so.

Wire it to GitHub's `workflow_run` webhook (docs/workflows.md, "Webhooks"):

    [automations]
    folder = "/etc/agentd/automations"      # copy this file there

    [automations.hooks.routes.github]
    workflow = "ci_failure"
    secret_env = "GITHUB_HOOK_SECRET"      # the same secret as in the repository's webhook

The re-run needs a token allowed to re-run workflows (`actions: write`), in the daemon's
environment as GITHUB_TOKEN. GitHub sends the delivery id in X-GitHub-Delivery, so a delivery
GitHub repeats starts nothing new; `ask_owner` waits up to 12 hours, then ignores the failure.
"""

from __future__ import annotations

import os

import aiohttp
from pydantic import BaseModel

from agentd.automations import AutoStep, NonRetryable, Retry, workflow


class Run(BaseModel):
    id: int
    name: str = "CI"
    conclusion: str | None = None
    head_branch: str = ""
    html_url: str = ""


class Repository(BaseModel):
    full_name: str


class WorkflowRunEvent(BaseModel):
    """The part of GitHub's `workflow_run` payload this automation reads."""

    action: str
    workflow_run: Run
    repository: Repository


class Outcome(BaseModel):
    action: str  # ignored | rerun | declined


async def rerun(repo: str, run_id: int) -> int:
    """POST .../actions/runs/{id}/rerun; a 4xx other than 429 will not get better by retrying."""
    api = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
    headers = {
        "Authorization": f"Bearer {os.environ.get('GITHUB_TOKEN', '')}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    url = f"{api}/repos/{repo}/actions/runs/{run_id}/rerun"
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.post(url, headers=headers) as r:
        if 400 <= r.status < 500 and r.status != 429:
            raise NonRetryable(f"GitHub refused the re-run: HTTP {r.status}")
        r.raise_for_status()
        return r.status


@workflow("ci_failure", input=WorkflowRunEvent, output=Outcome, version=1)
async def ci_failure(step: AutoStep, event: WorkflowRunEvent) -> Outcome:
    """Ask the owner about a failed CI run; re-run it on their word."""
    run = event.workflow_run
    if event.action != "completed" or run.conclusion != "failure":
        return Outcome(action="ignored")  # no step ran: nothing was sent, nothing cost anything
    text = (f"❌ **{run.name}** failed on `{event.repository.full_name}` "
            f"({run.head_branch or 'no branch'}).\n{run.html_url}\n\nRe-run it?")  # fmt: skip
    choice = await step.ask_owner(text, ["Re-run", "Ignore"], timeout=12 * 3600, default="Ignore")
    if choice != "Re-run":
        return Outcome(action="declined")
    # GitHub down for a while: the backoff (30 s, 60 s, …) is a durable sleep across restarts.
    await step.do("rerun", rerun, event.repository.full_name, run.id,
                  retry=Retry(limit=6, delay=30, max_delay=900))  # fmt: skip
    await step.send("told", f"🔁 Re-running {run.name} on `{event.repository.full_name}`.")
    return Outcome(action="rerun")
