"""Informative groups: which problems a step draws after its first batch and which groups it learns from."""

from dataclasses import dataclass

from talktosolve.learning.informative import chosen, enough, informative, more_problems


@dataclass(frozen=True)
class P:
    id: str


def test_a_group_is_informative_when_its_rewards_differ():
    assert informative([0.0, 0.5, 0.0, 0.0]) and informative([1.0, 0.0])
    assert not informative([0.0, 0.0, 0.0, 0.0]) and not informative([1.0, 1.0])


def test_the_step_learns_from_the_first_informative_groups_in_the_order_drawn():
    groups = [[0, 0], [0, 1], [1, 1], [0.5, 0], [0, 0], [1, 0], [0, 1]]
    assert chosen(groups, 3) == [1, 3, 5]
    assert enough(groups, 4) and not enough(groups, 5)


def test_at_the_cap_the_batch_is_topped_up_with_groups_that_scored_alike():
    groups = [[0, 0], [0, 1], [1, 1], [0, 0]]
    assert chosen(groups, 3) == [0, 1, 2]  # the one informative group, then the first two flat ones
    assert chosen([[0, 0]] * 3, 2) == [0, 1]


def test_more_problems_are_new_to_the_step_and_repeat_for_the_same_seed_step_and_draw():
    problems = [P(str(i)) for i in range(20)]
    drawn = {"0", "1", "2", "3"}
    a = more_problems(problems, 7, 3, 1, 4, drawn)
    assert a == more_problems(problems, 7, 3, 1, 4, drawn), "a resumed run draws the same"
    assert len(a) == 4 and not {p.id for p in a} & drawn and len({p.id for p in a}) == 4
    assert a != more_problems(problems, 7, 3, 2, 4, drawn), "each draw its own stream"
    assert len(more_problems(problems, 7, 3, 1, 30, drawn)) == 16, "fewer when the set runs short"
