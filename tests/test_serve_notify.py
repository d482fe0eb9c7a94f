"""Issue 26 item 5: the automation that announces a failed nightly (flows/notify.py), created and
brought up to date by name against the session's Prefect API (tests/test_serve_stop.py checks it
after a real `make serve`, and that a failed nightly run's notification arrives)."""

from __future__ import annotations

from uuid import uuid4

from prefect.automations import Automation, DoNothing, SendNotification
from prefect.blocks.notifications import CustomWebhookNotificationBlock
from prefect.client.orchestration import get_client

from aiperf_flows import notify


def test_the_trigger_is_a_nightly_run_failing_or_crashing() -> None:
    automation = notify.nightly_automation(None)
    trigger = automation.trigger
    assert trigger.expect == {"prefect.flow-run.*"}
    assert trigger.match.model_dump()["prefect.state-type"] == ["FAILED", "CRASHED"]
    related = trigger.match_related.model_dump()
    assert related == {
        "prefect.resource.role": "flow",
        "prefect.resource.name": "aiperf-nightly-regression",
    }
    assert [type(a) for a in automation.actions] == [DoNothing]
    block = uuid4()
    (action,) = notify.nightly_automation(block).actions
    assert isinstance(action, SendNotification) and action.block_document_id == block
    assert "flow_run.state.message" in action.body and "ui_url" in action.body


def _named() -> list:
    with get_client(sync_client=True) as client:
        return client.read_automations_by_name(name=notify.AUTOMATION)


def test_made_once_by_name_and_pointed_at_the_block_once_it_exists(prefect_api, capsys) -> None:
    block_name = f"aiperf-nightly-{uuid4().hex[:8]}"
    assert notify.main(["--block", block_name]) == 0
    assert "announced nowhere yet" in capsys.readouterr().err
    notify.ensure(block_name)  # again: still one
    (first,) = _named()
    assert [type(a).__name__ for a in first.actions] == ["DoNothing"]

    block_id = CustomWebhookNotificationBlock(
        name="hook", url="http://127.0.0.1:9/nightly", json_data={"text": "{{body}}"}
    ).save(block_name)
    assert notify.main(["--block", block_name]) == 0
    assert "Custom Webhook block" in capsys.readouterr().err
    (updated,) = _named()
    assert updated.id == first.id
    (action,) = updated.actions
    assert action.type == "send-notification" and action.block_document_id == block_id
    Automation(**updated.model_dump()).delete()


def test_a_name_two_blocks_share_is_refused_in_one_line(prefect_api, capsys) -> None:
    from prefect.blocks.notifications import SlackWebhook

    name = f"aiperf-twice-{uuid4().hex[:8]}"
    CustomWebhookNotificationBlock(name="hook", url="http://127.0.0.1:9/").save(name)
    SlackWebhook(url="http://127.0.0.1:9/slack").save(name)
    assert notify.main(["--block", name]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "2 notification blocks named" in error


def test_no_server_is_one_line(capsys) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        assert notify.main([]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "PREFECT_API_URL" in error
