"""Unit tests of the examples' shared pieces: answer parsing, rewards, grading, datums."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from common import loop  # noqa: E402
from common.code_tasks import (  # noqa: E402
    NO_CODE_REWARD,
    TOOL_CALL,
    code_block,
    extract_code,
    grade,
    make_tasks,
    tool_feedback,
    wrong_solution,
)
from common.math_tasks import make_split, math_reward, parse_answer  # noqa: E402
from common.preference_data import make_pairs  # noqa: E402

from localsession.engine.builtin import build_tokenizer  # noqa: E402


def test_math_answers_parse_only_from_a_final_answer_line() -> None:
    assert parse_answer("3 + 4 = 7\n#### 7") == 7
    assert parse_answer("#### 12\n") == 12
    assert parse_answer("#### 7 and more text") is None
    assert parse_answer("7") is None
    train, test = make_split(0, 200, 50)
    assert not {p.question for p in train} & {p.question for p in test}
    for p in train + test:
        assert 0 <= p.answer <= 9 and math_reward(p.solution, p) == 1.0
        assert math_reward(p.solution.replace(f"#### {p.answer}", "#### 99"), p) == 0.0


def test_code_rewards_pass_fail_and_no_code() -> None:
    task = make_tasks(0, 1)[0]
    assert grade(task.solution, task)[0] == 1.0
    reward, result = grade(wrong_solution(task, random.Random(0)), task)
    assert reward == 0.0 and result is not None and "expected" in tool_feedback(result)
    assert grade("def f(x): return x", task) == (NO_CODE_REWARD, None)
    assert extract_code(f"text\n{code_block('a = 1')}\n{TOOL_CALL}") == "a = 1\n"
    hang = code_block("def f(x):\n    while True:\n        pass")
    reward, result = grade(hang, task)
    assert reward == 0.0 and tool_feedback(result) == "the program did not finish"


def test_trajectory_datum_trains_sampled_tokens_only() -> None:
    code_rl = pytest.importorskip("code_rl")
    traj = code_rl.Trajectory(
        segments=[([1, 2, 3], [-0.1, -0.2, -0.3]), ([9, 9], None), ([4], [-0.4])]
    )
    datum = code_rl.trajectory_datum([257, 7, 8], traj, advantage=0.5)
    inputs = datum.loss_fn_inputs
    assert datum.model_input.to_ints() == [257, 7, 8, 1, 2, 3, 9, 9]
    assert inputs["target_tokens"].data == [7, 8, 1, 2, 3, 9, 9, 4]
    assert inputs["weights"].data == [0, 0, 1, 1, 1, 0, 0, 1]
    assert inputs["advantages"].data == [0, 0, 0.5, 0.5, 0.5, 0, 0, 0.5]
    assert inputs["logprobs"].data == [0, 0, -0.1, -0.2, -0.3, 0, 0, -0.4]


def test_two_turn_warm_start_renders_the_tool_turn_in_the_chat_format() -> None:
    code_rl = pytest.importorskip("code_rl")
    tok = build_tokenizer()
    task = make_tasks(0, 1)[0]
    datum = code_rl.warm_start_datum(tok, task, True, random.Random(0))
    text = tok.decode(datum.model_input.to_ints() + datum.loss_fn_inputs["target_tokens"].data[-1:])
    assert text.count("<|im_start|>assistant\n") == 2
    assert "<|im_end|>\n<|im_start|>user\n<tool_response>\ncheck_solution: " in text
    assert TOOL_CALL in text and text.endswith(task.solution + "<|im_end|>")


def test_chat_problems_score_the_replys_last_number() -> None:
    train, test = make_split(0, 50, 10, style="chat")
    assert not {p.question for p in train} & {p.question for p in test}
    p = test[0]
    assert p.question == f"Compute {p.a} + {p.b}. Reply with the result only."
    assert 10 <= p.a <= 99 and 10 <= p.b <= 99 and p.answer == p.a + p.b
    assert math_reward(f"{p.a} + {p.b} = {p.answer}", p) == 1.0
    assert math_reward(f"{p.answer}", p) == 1.0
    assert math_reward(f"{p.a} + {p.b} = {p.answer + 1}", p) == 0.0
    assert math_reward("I cannot", p) == 0.0


def test_rl_datum_passes_the_sampling_temperature() -> None:
    datum = loop.rl_datum([257, 1], [2, 3], [-1.0, -2.0], [0.5, 0.5], temperature=0.7)
    assert datum.loss_fn_inputs["temperature"].data == [0.7] * 3
    assert "temperature" not in loop.rl_datum([257, 1], [2], [-1.0], [1.0]).loss_fn_inputs
    assert loop.group_advantages([1.0, 0.0, 1.0, 0.0]) == pytest.approx([1, -1, 1, -1], abs=1e-5)


def test_preference_pairs_hold_the_same_bytes_and_held_out_subjects() -> None:
    train, test = make_pairs(0, 100, 20)
    for pair in train + test:
        assert sorted(pair.chosen) == sorted(pair.rejected) and pair.chosen != pair.rejected
    subject = lambda p: p.chosen.split(" ")[1]  # noqa: E731
    assert not {subject(p) for p in train} & {subject(p) for p in test}


class _Done:
    def __init__(self, value: object) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> object:
        return self.value


class _ScriptedSampler:
    """Answers every request with the same scripted completions (one right, the rest not)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def sample(self, prompt: list[int], num_samples: int, params: object) -> _Done:
        from localsession import SampledSequence, SampleResponse

        seqs = [
            SampledSequence(
                stop_reason="stop",
                tokens=list(text.encode()) + [258],
                logprobs=[-1.0] * (len(text.encode()) + 1),
            )
            for text in self.texts[:num_samples]
        ]
        return _Done(SampleResponse(sequences=seqs))


def test_grpo_step_trains_on_groups_with_signal(relaxed: object) -> None:
    """grpo_math's step on a real session: mixed groups train with ppo, all-equal ones skip."""
    grpo_math = pytest.importorskip("grpo_math")
    problems = make_split(0, 2, 0)[0]
    right = problems[0].solution
    svc = loop.Service(relaxed, relaxed=True)
    with relaxed.create_lora_training_client("localsession/tiny", rank=4, alpha=8) as tc:  # type: ignore[attr-defined]
        tok = tc.get_tokenizer()
        sampler = _ScriptedSampler([right, "1 + 1 = 2\n#### 99", "junk", "#### 0 trailing"])
        args = grpo_math.resolve_options(
            grpo_math.loop.parse_args(
                "",
                steps=None,
                smoke_steps=1,
                argv=["--group-size", "4", "--learning-rate", "1e-3", "--temperature", "1.0"],
                extra=grpo_math.add_options,
            )
        )
        metrics = grpo_math.grpo_step(svc, tc, sampler, tok, problems[:1], 0, args)
        assert metrics["reward"] == 0.25 and metrics["groups_used"] == 1.0
        assert {"loss", "kl_sample_train", "clipfrac", "grad_norm", "train_tokens"} <= set(metrics)
        assert metrics["kl_sample_train"] != 0.0  # scripted logprobs are not the policy's
        flat = grpo_math.grpo_step(
            svc, tc, _ScriptedSampler(["junk"] * 4), tok, problems[:1], 0, args
        )
        assert flat["groups_used"] == 0.0 and "loss" not in flat


def test_grpo_demo_reports_accuracy_lines_and_the_first_question_it_learned() -> None:
    """The demo's lines: accuracy before and after on lines of their own, and the first
    held-out question (by position) that training taught (wrong before, right after), else
    the first one it answers right, with its reply before training; never a wrong reply."""
    grpo_math = pytest.importorskip("grpo_math")
    problems = make_split(0, 50, 3, style="chat")[1]
    right = [str(p.answer) for p in problems]
    before = {"greedy": 1 / 3, "sampled": 0.25, "replies": ["x", right[1], "y"]}
    after = {"greedy": 2 / 3, "sampled": 0.5, "replies": ["z", "w", right[2]]}
    for result in (before, after):
        result["correct"] = [
            math_reward(r, p) > 0 for r, p in zip(result["replies"], problems, strict=True)
        ]
    assert grpo_math.accuracy_line("before", before) == (
        "held-out accuracy before training: 0.333 greedy (1/3), 0.250 sampled"
    )
    learned = grpo_math.first_learned(problems, before, after)
    assert learned is not None and learned["question"] == problems[2].question
    assert learned["reply_after"] == right[2] and learned["reply_before"] == "y"
    assert learned["correct_before"] is False
    assert grpo_math.first_learned(problems, after, before)["question"] == problems[1].question
    # right before at 1, right after at 1 and 2: question 2 is the one it learned
    both = {**after, "correct": [False, True, True], "replies": ["z", right[1], right[2]]}
    assert grpo_math.first_learned(problems, before, both)["question"] == problems[2].question
    # nothing learned, one known: that one, marked as right before
    known = grpo_math.first_learned(problems, before, {**both, "correct": [False, True, False]})
    assert known["question"] == problems[1].question and known["correct_before"] is True
    nothing = {**after, "correct": [False, False, False]}
    assert grpo_math.first_learned(problems, before, nothing) is None


#: SmolLM2-135M-Instruct's chat template (as its GGUF ships it): a default system turn is
#: inserted when the messages have none.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_grpo_chat_prompt_keeps_the_template_default_system_turn() -> None:
    """The chat task's prompt: by default no system turn is passed, so SmolLM2's template adds
    its own; ``--system-prompt ""`` gives an empty one instead (16 tokens fewer, but measured:
    0/50 held-out right before training, against 6/50 with the default turn)."""
    grpo_math = pytest.importorskip("grpo_math")
    tok = build_tokenizer()
    tok.chat_template = SMOLLM2_TEMPLATE
    problem = make_split(0, 1, 0, style="chat")[0][0]
    user = f"<|im_start|>user\n{problem.question}<|im_end|>\n<|im_start|>assistant\n"
    empty = tok.decode(grpo_math.prompt_ids(tok, problem, ""))
    default = tok.decode(grpo_math.prompt_ids(tok, problem, "none"))
    assert empty == "<|im_start|>system\n<|im_end|>\n" + user
    assert default == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n" + user
    )
    args = grpo_math.resolve_options(
        grpo_math.loop.parse_args(
            "",
            steps=None,
            smoke_steps=1,
            argv=["--base-model", "HuggingFaceTB/SmolLM2-135M-Instruct"],
            extra=grpo_math.add_options,
        )
    )
    assert args.task == "chat" and args.system_prompt == "none" and args.max_tokens == 12
