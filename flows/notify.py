"""A failed nightly tells someone: the Prefect automation `make serve` creates.

Trigger: a flow run of the `aiperf-nightly-regression` flow (the `nightly-regression`
deployment's, or one started by hand) entering a state of type FAILED or CRASHED: Failed with the
regression in its message, Crashed, TimedOut, or any other failed state. Action: a notification
through the notification block the user names `aiperf-nightly` (Slack, Microsoft Teams, Discord,
Mattermost, Opsgenie, PagerDuty, Twilio SMS, SendGrid email or a custom webhook: any Prefect block
that can notify), with the run's name, state, message and its page in the UI.

Until that block exists the automation still exists, with Prefect's "do nothing" action: a failed
nightly then shows on the dashboard and in the event feed as the automation's firing, and
`make serve` says in one line that it is announced nowhere and how to choose. Sending to a
placeholder instead would fail on every failed night and look configured when it is not; and no
Prefect notification block delivers on this machine alone. Creating the block and running
`make serve` (or this module) again points the automation at it.

    python -m aiperf_flows.notify [--block NAME]

creates or updates it (by its name, so running it again changes nothing more) on the server
PREFECT_API_URL names, with PREFECT_API_AUTH_STRING when that server requires it: `make serve`
runs it, and it works as well against any existing server.
"""

from __future__ import annotations

import argparse
import sys
from uuid import UUID

import httpx
from prefect.automations import Automation, DoNothing, EventTrigger, SendNotification
from prefect.client.orchestration import get_client
from prefect.events.schemas.automations import Posture
from prefect.exceptions import PrefectHTTPStatusError

from aiperf.errors import UserError

AUTOMATION = "aiperf-nightly-failed"
BLOCK = "aiperf-nightly"
NIGHTLY_FLOW = "aiperf-nightly-regression"  # flows/nightly.py's @flow name
FAILED_TYPES = ["FAILED", "CRASHED"]  # Prefect state types: a named failed state is FAILED too

SUBJECT = "aiperf nightly {{ flow_run.name }}: {{ flow_run.state.name }}"
BODY = (
    "The aiperf nightly regression run {{ flow_run.name }} ended {{ flow_run.state.name }}: "
    "{{ flow_run.state.message }}\n{{ flow_run|ui_url }}"
)


def nightly_automation(block_id: UUID | None) -> Automation:
    """The automation's definition: notify through the block `block_id`, or do nothing without one."""
    trigger = EventTrigger(
        expect={"prefect.flow-run.*"},
        match={"prefect.resource.id": "prefect.flow-run.*", "prefect.state-type": FAILED_TYPES},
        match_related={"prefect.resource.role": "flow", "prefect.resource.name": NIGHTLY_FLOW},
        for_each={"prefect.resource.id"},
        posture=Posture.Reactive,
        threshold=1,
    )
    action = (
        DoNothing()
        if block_id is None
        else SendNotification(block_document_id=block_id, subject=SUBJECT, body=BODY)
    )
    return Automation(
        name=AUTOMATION,
        description=(
            f"A run of the {NIGHTLY_FLOW} flow (deployment nightly-regression) failed or crashed: "
            f"notify through the notification block {BLOCK!r} (docs/prefect.md)"
        ),
        trigger=trigger,
        actions=[action],
    )


def notification_block(name: str) -> tuple[UUID, str] | None:
    """(id, block type) of the block called `name` that can send notifications, or None."""
    with get_client(sync_client=True) as client:
        documents = client.read_block_documents(include_secrets=False)
    found = [
        d
        for d in documents
        if d.name == name and d.block_schema and "notify" in d.block_schema.capabilities
    ]
    if len(found) > 1:
        kinds = ", ".join(sorted(d.block_type.name for d in found if d.block_type))
        raise UserError(
            f"there are {len(found)} notification blocks named {name!r} ({kinds}); delete all but "
            "the one a failed nightly should go to"
        )
    if not found:
        return None
    block = found[0]
    assert block.id is not None
    return block.id, block.block_type.name if block.block_type else "notification"


def ensure(block_name: str = BLOCK) -> tuple[Automation, str | None]:
    """Create the automation, or bring the one of that name up to date; (it, the block's type or
    None when no block of that name exists)."""
    block = notification_block(block_name)
    wanted = nightly_automation(block[0] if block else None)
    with get_client(sync_client=True) as client:
        existing = client.read_automations_by_name(name=AUTOMATION)
    if existing:
        for duplicate in existing[1:]:  # two `make serve`s racing: keep one
            Automation(**duplicate.model_dump()).delete()
        wanted.id = existing[0].id
        wanted.update()
    else:
        wanted.create()
    return wanted, block[1] if block else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aiperf_flows.notify",
        description="Create or update the automation that announces a failed nightly.",
    )
    parser.add_argument("--block", default=BLOCK, help="the notification block's name")
    options = parser.parse_args(argv)
    try:
        _, kind = ensure(options.block)
    except UserError as error:
        print(f"notify: {error}", file=sys.stderr)
        return 2
    except (
        PrefectHTTPStatusError,
        httpx.HTTPError,
    ) as error:  # no server, or the auth string's refusal
        print(
            f"notify: the Prefect API refused or did not answer ({error.__class__.__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}); check PREFECT_API_URL and "
            "PREFECT_API_AUTH_STRING",
            file=sys.stderr,
        )
        return 2
    if kind is None:
        print(
            f"a failed nightly is announced nowhere yet: create a notification block named "
            f"{options.block!r} (UI: Blocks -> +, e.g. Slack Webhook), then run make serve or "
            "python -m aiperf_flows.notify again",
            file=sys.stderr,
        )
    else:
        print(
            f"a failed nightly is announced through the {kind} block {options.block!r} "
            f"(automation {AUTOMATION!r})",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
