"""The training pool by difficulty: counting solved chats, keeping problems, and the pre-pass on a tiny model."""

from dataclasses import dataclass

from talktosolve.experiment.pool import keep, solved_counts


@dataclass(frozen=True)
class P:
    id: str


def test_a_chat_solves_its_problem_when_its_team_reward_is_above_zero():
    chats = [{"problem_id": "a", "reward": 0.5}, {"problem_id": "a", "reward": 0.0},
             {"problem_id": "b", "reward": 0.0}, {"problem_id": "a", "reward": 1.0}]
    assert solved_counts(chats) == {"a": 2, "b": 0}


def test_the_pool_keeps_problems_solved_between_its_bounds_in_their_order():
    problems = [P("a"), P("b"), P("c"), P("d")]
    counts = {"a": 0, "b": 1, "c": 4, "d": 2}
    assert [p.id for p in keep(problems, counts, 1)] == ["b", "c", "d"]
    assert [p.id for p in keep(problems, counts, 1, 2)] == ["b", "d"]
    assert [p.id for p in keep(problems, counts, 3)] == ["c"]
