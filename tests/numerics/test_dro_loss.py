"""The ``dro`` loss's pure functions (numerics/dro_loss.py) against closed forms and a finite
difference of the loss itself."""

from __future__ import annotations

import pytest

from localsession.numerics.dro_loss import dro_backward_weights, dro_loss


def test_dro_loss_is_the_closed_form() -> None:
    # -w * (lp*A - beta/2 * (lp - q)^2) at lp=-1, q=-1.5, A=2, w=1, beta=0.1: 2 + 0.0125
    assert dro_loss([-1.0], [-1.5], [2.0], [1.0], 0.1) == pytest.approx([2.0125])
    # zero weight: nothing; beta 0: plain -lp*A
    assert dro_loss([-3.0, -2.0], [-1.0, -1.0], [1.0, -0.5], [0.0, 1.0], 0.0) == [0.0, -1.0]


def test_the_backward_weights_are_minus_the_loss_gradient() -> None:
    lp, q, a, w, beta = (
        [-1.0, -0.2, -4.0],
        [-1.5, -0.3, -2.0],
        [2.0, -1.0, 0.5],
        [1.0, 0.5, 2.0],
        0.3,
    )
    weights = dro_backward_weights(lp, q, a, w, beta)
    assert weights == pytest.approx([2.0 - 0.3 * 0.5, 0.5 * (-1.0 - 0.3 * 0.1), 2.0 * (0.5 + 0.6)])
    h = 1e-6
    for i in range(3):
        up = [x + h if j == i else x for j, x in enumerate(lp)]
        down = [x - h if j == i else x for j, x in enumerate(lp)]
        slope = (sum(dro_loss(up, q, a, w, beta)) - sum(dro_loss(down, q, a, w, beta))) / (2 * h)
        assert slope == pytest.approx(-weights[i], rel=1e-6)  # cross entropy's grad is -weight
