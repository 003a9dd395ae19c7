"""The sampler table's own rules (server/tinker/sampler_table.py), without a server: which
hidden sampler sessions an expiry sweep reclaims, and that a session's end drops only its
samplers."""

from __future__ import annotations

from localsession.server.tinker.sampler_table import Sampler, SamplerTable


def _sampler(sampler_id: str, base: str, session: str | None, unembed: bool = False) -> Sampler:
    return Sampler(sampler_id, base, None, None, None, unembed, session)


def test_reclaim_keeps_held_and_recent_hidden_sessions_and_forgets_the_rest() -> None:
    table = SamplerTable()
    table.add(_sampler("s1", "a", "live"))
    table.add(_sampler("s2", "b", "gone"))
    for key, name in [("a", "hidden-a"), ("b", "hidden-b"), ("c", "hidden-c")]:
        table.set_hidden(key, name)
    used = table._used  # noqa: SLF001 - set the last-use times the sweep compares
    used.update({"a": 0.0, "b": 0.0, "c": 95.0})
    # at now=100 with timeout 10: "a" is held by a live session, "c" ran 5 s ago; "b" is
    # held only by an ended session and idle for 100 s
    names, left = table.reclaim({"live"}, now=100.0, timeout=10.0)
    assert names == ["hidden-b"] and left
    assert table.hidden() == {"a": "hidden-a", "c": "hidden-c"}
    names, left = table.reclaim(set(), now=200.0, timeout=10.0)
    assert sorted(names) == ["hidden-a", "hidden-c"] and not left


def test_a_head_adapting_sampler_has_its_own_hidden_key_and_session_end_drops_its_own() -> None:
    table = SamplerTable()
    table.add(_sampler("s1", "a", "one"))
    table.add(_sampler("s2", "a", "two", unembed=True))
    assert {s.key for s in table.all()} == {"a", "a +unembed"}
    table.drop_session("one")
    assert [s.sampler_id for s in table.all()] == ["s2"]
    table.set_hidden("a", "first")
    table.drop_hidden("a", "other")  # not its session: kept
    assert table.use("a") == "first"
    table.drop_hidden("a", "first")
    assert table.use("a") is None
