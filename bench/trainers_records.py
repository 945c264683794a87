"""The trainer adapters against the trainers' own installed code: verl, SkyRL and slime.

These trainers are too heavy for CI (ray, vLLM, Megatron; slime is not on PyPI), so this is a
bench run by hand, each trainer in a virtualenv of its own (the TRL adapter's check runs in CI:
tests/unit/test_trainer_trl.py). ``run`` builds groups of real sessions of envfarm's agent loop
(tests/trainer_groups.py), serves an API with an in-memory job service that answers each
submitted job with such groups, and runs each trainer's check in that trainer's Python with
the checkout first on PYTHONPATH::

    .venv/bin/python bench/trainers_records.py run --verl PY --skyrl PY --slime PY:SLIME_DIR

where PY is a Python with the trainer installed (for slime: one with torch and httpx, and a
checkout of THUDM/slime at SLIME_DIR). Each check prints one JSON report; a broken invariant
fails the check. What each check feeds to the trainer's own code:

- verl: ``AgentLoopOutput``s through ``AgentLoopWorker._agent_loop_postprocess`` and
  ``_postprocess`` into a ``DataProto``, then ``compute_grpo_outcome_advantage``; and
  ``EnvfarmAgentLoop.run()`` live for the four rollouts of one ``uid``.
- SkyRL: ``GeneratorOutput``s (whole and step-wise) through ``validate_generator_output`` and
  ``convert_prompts_responses_to_batch_tensors``; and ``EnvfarmGenerator.generate()`` live.
- slime: ``generate_rollout`` live through slime's ``call_rollout_fn``, then
  ``validate_rollout_id_annotated``, ``validate_rollout_routed_experts_for_replay`` and
  ``tensorize_rollout_data_for_training``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token"
JOB = {"tasks": ["alpha"], "policy": {"base_url": "oracle"}}


def load_groups(path: str) -> list[Any]:
    from envfarm.integrations.feed import FedGroup
    from envfarm.models.jobs import DeliveredGroup

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [FedGroup.of(DeliveredGroup.model_validate(g)) for g in data]


def sampled(trajectory: Any) -> list[int]:
    from envfarm.integrations.episodes import episode_rows

    rows = episode_rows(trajectory)
    if not rows:
        return []
    row = rows[-1]
    return [t for t, m in zip(row.response_ids, row.response_mask, strict=True) if m]


# ---------------------------------------------------------------------------- verl


def check_verl(groups_path: str, url: str) -> dict[str, Any]:
    import numpy as np
    import verl
    from omegaconf import OmegaConf
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.rollout.replica import TokenOutput

    from envfarm.integrations.verl import EnvfarmAgentLoop, agent_loop_output

    vocab = {"<pad>": 0, **{f"t{i}": i for i in range(1, 260)}}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<pad>")), pad_token="<pad>"
    )
    prompt_length, response_length = 4096, 4096
    groups = load_groups(groups_path)
    trajectories = [t for g in groups for t in g.trajectories]
    outputs = [agent_loop_output(t, prompt_length=prompt_length, response_length=response_length)
               for t in trajectories]  # fmt: skip
    worker = AgentLoopWorker.__new__(AgentLoopWorker)
    worker.rollout_config = SimpleNamespace(
        prompt_length=prompt_length, response_length=response_length
    )
    worker.tokenizer, worker.processor = tokenizer, None
    worker.reward_loop_worker_handles, worker.distillation_enabled = None, False
    worker.mm_processor_kwargs = {}

    async def postprocess() -> Any:
        internal = [await worker._agent_loop_postprocess(o, False, raw_prompt=[]) for o in outputs]
        return worker._postprocess(internal)

    batch = asyncio.run(postprocess())
    uids = np.array([t.group_id for t in trajectories], dtype=object)
    advantages, _ = compute_grpo_outcome_advantage(
        batch.batch["rm_scores"], batch.batch["response_mask"], uids
    )
    for i, trajectory in enumerate(trajectories):
        mask = batch.batch["response_mask"][i].bool()
        trained = batch.batch["responses"][i][mask].tolist()
        expected = sampled(trajectory) if trajectory.reward.valid else []
        assert trained == expected, i
        assert float(batch.batch["rm_scores"][i].sum()) == (trajectory.reward.value or 0.0), i
    live = asyncio.run(verl_live(url, tokenizer, EnvfarmAgentLoop, DictConfigWrap, OmegaConf,
                                 RLHFDataset, TokenOutput))  # fmt: skip
    return {
        "verl": verl.__version__,
        "batch": {key: list(value.shape) for key, value in batch.batch.items()},
        "rm_scores": batch.batch["rm_scores"].sum(dim=1).tolist(),
        "grpo_advantages": advantages[:, 0].tolist(),
        "trained_tokens": batch.batch["response_mask"].sum(dim=1).tolist(),
        "num_turns": batch.non_tensor_batch["__num_turns__"].tolist(),
        "min_global_steps": batch.non_tensor_batch["min_global_steps"].tolist(),
        "live": live,
    }


async def verl_live(url: str, tokenizer: Any, loop_cls: Any, wrap: Any, omegaconf: Any,
                    dataset_cls: Any, token_output: Any) -> dict[str, Any]:  # fmt: skip
    asked: list[dict[str, Any]] = []

    class ServerManager:
        async def generate(self, **request: Any) -> Any:
            asked.append(request)
            return token_output(token_ids=[1], extra_fields={"global_steps": 7})

    config = omegaconf.create({"actor_rollout_ref": {"rollout": {
        "n": 4, "prompt_length": 4096, "response_length": 4096}}, "data": {}})  # fmt: skip

    def agent_loop() -> Any:
        return loop_cls(trainer_config=wrap(config), server_manager=ServerManager(),
                        tokenizer=tokenizer, processor=None, dataset_cls=dataset_cls,
                        data_config=wrap(config.data), url=url, token=TOKEN,
                        job=omegaconf.create(JOB))  # fmt: skip

    row = {"uid": "u-1", "extra_info": {"task_id": "alpha"}, "raw_prompt": []}
    outputs = await asyncio.gather(
        *[agent_loop().run({"temperature": 1.0}, **row) for _ in range(4)]
    )
    return {
        "probes": len(asked),
        "probe_max_tokens": asked[0]["sampling_params"]["max_tokens"],
        "trajectories": [o.extra_fields["envfarm_trajectory_id"] for o in outputs],
        "rewards": [o.reward_score for o in outputs],
        "masked": [sum(o.response_mask) for o in outputs],
    }


# --------------------------------------------------------------------------- SkyRL


def check_skyrl(groups_path: str, url: str) -> dict[str, Any]:
    from importlib.metadata import version

    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
    from skyrl.train.generators.base import BatchMetadata, TrajectoryID
    from skyrl.train.utils.trainer_utils import validate_generator_output

    from envfarm.integrations.skyrl import EnvfarmGenerator, generator_output

    groups = load_groups(groups_path)
    trajectories = [t for g in groups for t in g.trajectories]
    ids = [TrajectoryID(instance_id=t.group_id, repetition_id=k)
           for g in groups for k, t in enumerate(g.trajectories)]  # fmt: skip
    report: dict[str, Any] = {"skyrl": version("skyrl")}
    for step_wise in (False, True):
        out = generator_output(trajectories, ids, step_wise=step_wise)
        validate_generator_output(len(trajectories), out, step_wise=step_wise, routes_expected=True)
        rewards = out["rewards"]
        if not step_wise:
            responses = out["response_ids"]
            rewards = [
                [0.0] * (len(r) - 1) + [float(v)] for r, v in zip(responses, rewards, strict=True)
            ]
        tensors = convert_prompts_responses_to_batch_tensors(
            0, out["prompt_token_ids"], out["response_ids"], rewards, out["loss_masks"],
            out["rollout_logprobs"], out["rollout_expert_indices"],
        )  # fmt: skip
        for i, trajectory in enumerate(trajectories if not step_wise else []):
            row_sampled = [t for t, m in zip(out["response_ids"][i], out["loss_masks"][i],
                                             strict=True) if m]  # fmt: skip
            assert row_sampled == (sampled(trajectory) if trajectory.reward.valid else []), i
        report["step_wise" if step_wise else "whole"] = {
            "rows": len(out["response_ids"]),
            "is_last_step": out["is_last_step"],
            "sequences": list(tensors[0].shape),
            "loss_tokens": int(tensors[4].sum()),
            "rewards": float(tensors[3].sum()),
        }
    generator = EnvfarmGenerator(url, JOB, token=TOKEN)
    batch = {"prompts": [[{"role": "user", "content": "x"}]] * 4, "env_classes": ["envfarm"] * 4,
             "env_extras": [{"task_id": "alpha"}] * 4, "sampling_params": None,
             "trajectory_ids": [TrajectoryID(instance_id="p-1", repetition_id=k) for k in range(4)],
             "batch_metadata": BatchMetadata(global_step=7, training_phase="train")}  # fmt: skip
    live = asyncio.run(generator.generate(batch))
    validate_generator_output(4, live, step_wise=False, routes_expected=True)
    report["live"] = {"rows": len(live["response_ids"]), "rewards": live["rewards"]}
    return report


# --------------------------------------------------------------------------- slime


def check_slime(url: str) -> dict[str, Any]:
    import torch
    from slime.observability.rollout_data_utils import (
        tensorize_rollout_data_for_training,
        validate_rollout_id_annotated,
        validate_rollout_routed_experts_for_replay,
    )
    from slime.rollout.base_types import RolloutFnTrainOutput, call_rollout_fn
    from slime.utils.types import Sample

    from envfarm.integrations import slime as adapter

    args = SimpleNamespace(envfarm_url=url, envfarm_job=JOB, envfarm_token=TOKEN,
                           rollout_batch_size=2, n_samples_per_prompt=4, num_layers=2,
                           moe_router_topk=2)  # fmt: skip
    output = call_rollout_fn(adapter.generate_rollout, args, 3, None, evaluation=False)
    assert isinstance(output, RolloutFnTrainOutput)
    validate_rollout_id_annotated(output.samples)
    assert all(len(group) == args.n_samples_per_prompt for group in output.samples)
    flat: list[Any] = output.samples
    while isinstance(flat[0], list):
        flat = [s for inner in flat for s in inner]
    assert all(isinstance(s, Sample) for s in flat)
    for sample in flat:
        assert len(sample.loss_mask) == sample.response_length
        assert len(sample.rollout_log_probs) == sample.response_length
        assert len(sample.tokens) > sample.response_length
    kept = [s for s in flat if not s.remove_sample]
    routed = [torch.as_tensor(s.rollout_routed_experts) for s in kept]
    validate_rollout_routed_experts_for_replay(routed, args)
    data = {"tokens": [s.tokens for s in kept], "loss_masks": [s.loss_mask for s in kept],
            "rollout_log_probs": [s.rollout_log_probs for s in kept],
            "rollout_routed_experts": [s.rollout_routed_experts for s in kept]}  # fmt: skip
    tensorize_rollout_data_for_training(data)
    second = adapter.generate_rollout(args, 4)
    return {
        "groups": len(output.samples),
        "samples": len(flat),
        "removed": sum(s.remove_sample for s in flat),
        "statuses": sorted({s.status.value for s in flat}),
        "rollout_ids_per_trajectory": [
            len({s.rollout_id for s in t}) for g in output.samples for t in g
        ],
        "rewards": [s.reward for s in flat],
        "weight_versions": sorted({v for s in flat for v in s.weight_versions}),
        "second_call_groups": len(second.samples),
        "tensors": [list(t.shape) for t in data["tokens"][:2]],
    }


# ---------------------------------------------------------------------- orchestrator


async def serve_and_check(targets: dict[str, list[str]]) -> dict[str, Any]:
    from envfarm.api import create_app
    from envfarm.api.server import ApiServer
    from tests.trainer_groups import real_group
    from tests.unit.api_double import MemoryService

    groups_path = ROOT / "runs" / "bench-trainers-groups.json"
    groups_path.parent.mkdir(exist_ok=True)
    offline = [await real_group(1), await real_group(2, version="4", dispatch_version="4")]
    groups_path.write_text(json.dumps([g.model_dump(mode="json") for g in offline]))
    service = MemoryService()

    async def answer_jobs() -> None:
        handled: set[str] = set()
        while True:
            for job_id, request in list(service.requests.items()):
                if job_id in handled:
                    continue
                handled.add(job_id)
                version = service.versions[-1] if service.versions else "0"
                for task in request.tasks:
                    cursor = len(service.delivered[job_id]) + 1
                    group = await real_group(cursor, version=version, dispatch_version=version,
                                             task_id=task)  # fmt: skip
                    group.trajectories = group.trajectories[: request.group_size]
                    service.delivered[job_id].append(group)
                service.finish(job_id)
            await asyncio.sleep(0.05)

    reports: dict[str, Any] = {}
    async with ApiServer(create_app(service, token=TOKEN, keepalive_s=0.2), graceful_s=1) as server:
        answering = asyncio.create_task(answer_jobs())
        for name, (python, *extra) in targets.items():
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *extra])}
            started = time.monotonic()
            process = await asyncio.create_subprocess_exec(
                python, str(Path(__file__)), name, str(groups_path), server.url, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await process.communicate()
            lines = out.decode().strip().splitlines()
            reports[name] = (json.loads(lines[-1]) if process.returncode == 0 and lines
                             else {"failed": err.decode()[-3000:]})  # fmt: skip
            reports[name]["wall_s"] = round(time.monotonic() - started, 1)
            reports[name]["published_versions"] = list(service.versions)
        answering.cancel()
    return reports


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("verl", "skyrl", "slime"):
        name, groups, url = sys.argv[1:4]
        if name == "verl":
            report = check_verl(groups, url)
        elif name == "skyrl":
            report = check_skyrl(groups, url)
        else:
            report = check_slime(url)
        print(json.dumps(report))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--verl", help="a Python with verl installed")
    parser.add_argument("--skyrl", help="a Python with skyrl installed")
    parser.add_argument("--slime", help="PY:SLIME_DIR, a Python with torch and a slime checkout")
    options = parser.parse_args()
    targets = {name: getattr(options, name).split(":") for name in ("verl", "skyrl", "slime")
               if getattr(options, name)}  # fmt: skip
    reports = asyncio.run(serve_and_check(targets))
    print(json.dumps(reports, indent=2))
    if any("failed" in report for report in reports.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
