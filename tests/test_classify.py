"""Units: which updates are served, ignored or rejected (R-IN-3, R-IN-4, R-IN-5)."""

from __future__ import annotations

from agentd.telegram.classify import Identity, classify

ME = Identity(bot_id=999, bot_username="agentd_bot", allowed_user_ids=frozenset({42}))


def message(**extra: object) -> dict[str, object]:
    base = {"message_id": 5, "date": 1, "chat": {"id": 42, "type": "private"},
            "from": {"id": 42, "is_bot": False, "first_name": "O"}}  # fmt: skip
    return {"update_id": 1, "message": {**base, **extra}}


def test_text_from_the_owner_starts_a_turn() -> None:
    decision = classify(message(text="hi"), ME)
    assert decision.action == "turn" and decision.turn and decision.turn.text == "hi"


def test_strangers_are_rejected_without_content() -> None:
    update = message(text="secret")
    update["message"]["from"]["id"] = 7  # type: ignore[index]
    decision = classify(update, ME)
    assert decision.action == "reject" and decision.turn is None and decision.user_id == 7


def test_unsupported_kinds_and_photos() -> None:
    assert classify(message(sticker={"file_id": "x"}), ME).turn.unsupported_kind == "sticker"  # type: ignore[union-attr]
    photo = classify(message(photo=[{"file_id": "s", "width": 1, "height": 1},
                                    {"file_id": "b", "width": 9, "height": 9}],
                             caption="look"), ME)  # fmt: skip
    assert photo.turn and photo.turn.kind == "photo" and photo.turn.photo_file_id == "b"
    assert photo.turn.text == "look"


def test_groups_are_ignored_unless_enabled_and_addressed() -> None:
    group = message(text="hello @agentd_bot how are you")
    group["message"]["chat"] = {"id": -100, "type": "group"}  # type: ignore[index]
    assert classify(group, ME).action == "ignore"
    enabled = ME.model_copy(update={"allow_groups": True})
    decision = classify(group, enabled)
    assert (
        decision.action == "turn" and decision.turn and decision.turn.text == "hello  how are you"
    )
    group["message"]["text"] = "just chatting"  # type: ignore[index]
    assert classify(group, enabled).action == "ignore"


def test_malformed_and_unknown_updates_never_raise() -> None:
    updates = [
        {"update_id": 3},
        {"update_id": 4, "message": "nonsense"},
        {"update_id": 5, "channel_post": {}},
        {"update_id": 6, "message": {}},
    ]
    for update in updates:
        assert classify(update, ME).action == "ignore"


def test_callbacks_only_from_allowed_users() -> None:
    query = {"id": "q", "from": {"id": 42}, "data": "ap:x:y",
             "message": {"message_id": 1, "chat": {"id": 42}}}  # fmt: skip
    assert classify({"update_id": 9, "callback_query": query}, ME).action == "callback"
    query["from"] = {"id": 7}
    assert classify({"update_id": 9, "callback_query": query}, ME).action == "reject"
