"""FederatedLoop: a LightningModule whose training step is one communication round."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning import LightningModule
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from pytorch_lightning.utilities import rank_zero_info
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.attacks import Attack
from lightning_fl.aggregation.pipeline import AggregationPipeline
from lightning_fl.engines import (
    ClientEngine,
    LocalTrainingPlan,
    build_engine,
)
from lightning_fl.engines.evaluation import ClientEvaluation, GlobalModelView
from lightning_fl.faults.checkpoint_io import install_checkpoint_io
from lightning_fl.faults.dead_rank import report_dead_children
from lightning_fl.faults.preemption import Preemption
from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.privacy.config import DifferentialPrivacy
from lightning_fl.reporting.round_logger import RoundLogger, RunOutputs
from lightning_fl.simulation.callback import AggregationCallback, FederatedCallback
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.simulation.default_callbacks import callbacks_to_add
from lightning_fl.simulation.federation import ClientOptimizer, Federation, HierarchyView
from lightning_fl.simulation.hierarchy import Hierarchy
from lightning_fl.simulation.hparams import write_hparams
from lightning_fl.simulation.lazy_run import LazyGlobalModelView, federation_label_histograms, set_up_data
from lightning_fl.simulation.loop_checkpoint import CheckpointHooks
from lightning_fl.simulation.loop_evaluation import EvaluationHooks
from lightning_fl.simulation.lr_schedule import ClientLrSchedule
from lightning_fl.simulation.rounds import RoundRunner
from lightning_fl.simulation.user_checks import check_client, check_client_statistics, client_optimizer, head_prefixes
from lightning_fl.simulation.run_checks import (
    SUPPORTED_PRECISIONS,
    check_engine,
    check_finite_inputs,
    check_hierarchy_options,
    check_loop_arguments,
    client_state_dir,
    CLIENT_STATE_STORES,
    DIVERGENCE_POLICIES,
    EXCHANGES,
    check_setup,
    check_without_validation,
    cohort_sharding,
    probe_optimizer,
    set_cpu_threads,
)
from lightning_fl.simulation.sampling import ClientSampler
from lightning_fl.simulation.system import SystemHeterogeneity
from lightning_fl.state.client_rows import disk_rows_factory
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData
from lightning_fl.state.flat_state import FlatStateLayout
from lightning_fl.state.seeding import derive_seed
from lightning_fl.personalization.personal_part import batchnorm_entries
from lightning_fl.personalization.protocol import EvalProtocol
from lightning_fl.simulation.protocol_evaluation import ProtocolEvaluation
from lightning_fl.reporting.run_directory import run_directory


class FederatedLoop(EvaluationHooks, CheckpointHooks):
    """Runs federated training under a Lightning ``Trainer``: one epoch is one communication round.

    Each training step samples a cohort, has the client engine train every member from the global
    model ``w^t`` (the wrapped ``client`` module), hands the stacked results to the run's one
    aggregation callback, checks the new global weights, and calls the callbacks' round hooks
    (docs/algorithms.md, The round). ``--trainer.max_epochs`` is the number of rounds; validation evaluates the
    global model every ``check_val_every_n_epoch`` rounds on every client's validation split
    (``val/*``, what monitors such as ``EarlyStopping`` read) and test split (``test/*``, what the
    final table reports); the final model is evaluated once more at the end of ``fit`` if its round
    was not one of those. ``validate`` evaluates the validation splits, ``test`` the test splits.

    TensorBoard steps are round numbers: values logged at step ``r`` describe the global model after
    ``r`` completed rounds (round index ``t = r - 1`` in the hooks).

    Args:
        client: The per-client model, whose weights are the global model: a :class:`~lightning_fl.models.ClientModule`
            (the engines call its ``forward`` and ``loss``), or any ``LightningModule``, whose ``training_step``
            is the client objective (:mod:`lightning_fl.models.user_module`, docs/algorithms.md, Local training).
        optimizer: The client optimizer, e.g. ``torch.optim.SGD`` with ``lr`` and ``momentum`` from the
            config (client-side momentum lives here). Absent: a plain LightningModule's own
            ``configure_optimizers`` (and its scheduler), ``torch.optim.SGD`` with its defaults for a ClientModule.
        clients_per_round: ``K``, the cohort size (ignored with ``sampling: all``).
        local_epochs: ``E``, local epochs per round.
        batch_size: ``B``, local minibatch size.
        sampling: ``uniform``, ``by_samples`` or ``all`` (docs/algorithms.md, Sampling).
        seed: Seed of cohort sampling, batch order and model initialisation.
        engine: Client engine: ``auto`` (default: vectorized where it is exact and faster, see
            ``docs/performance.md``), ``sequential`` or ``vectorized``.
        max_parallel_clients: Upper bound on clients trained at once by a vectorized engine (memory).
        hierarchy: Three-layer client/institution/server training (docs/algorithms.md, Three-layer hierarchy); ``None`` for the
            usual two-layer loop. With a hierarchy, every client of every institution trains each round
            (``clients_per_round`` and ``sampling`` do not apply) and the aggregation callback combines
            institution models.
        keep_client_optimizer_state: Keep each client's optimizer state between its participations.
        lr_scheduler: A ``torch.optim.lr_scheduler`` class for the client lr (``train/lr``), stepped after every
            round, or every local step with ``lr_scheduler_interval: step`` (docs/algorithms.md, Local training).
        eval_batch_size: Samples per forward pass when evaluating all clients.
        client_state: Where callbacks' per-client state (SCAFFOLD controls, IGFL deltas, ...) lives:
            ``memory`` (default) or ``disk``, append-only files under ``<run dir>/client_state`` read
            row by row, for federations whose per-client state exceeds RAM (one model-sized
            row per client seen). Checkpoints then hold only an index of the rows; resume from the
            latest checkpoint (see docs/architecture.md).
        collective_timeout: With several processes (``trainer.strategy: ddp``, ``torchrun``, SLURM):
            seconds a rank waits for the others at a round's exchange before it stops with a message
            naming the ranks that did not arrive (they died or hang).
        exchange: With several processes: ``gather`` (default) all-gathers every trained client's
            weights in cohort order, so the model is bitwise the single-process one; ``reduce`` sums
            each rank's clients locally and all-reduces the sums (``d`` values instead of ``K x d``
            moved and held per rank; equal to float rounding), for aggregations that only average the
            clients' weights: FedAvg, FedProx, FedAvgM, FedAdam, FedYogi, FedAdagrad, FedFa, FedFaMo, DWFed.
        system: Simulated system heterogeneity (:class:`~lightning_fl.simulation.system.SystemHeterogeneity`):
            client availability, dropout, speeds, a round deadline with stragglers dropped or kept with
            partial work, over-selection, and a simulated clock (``sim/*``, ``clients/*`` scalars).
            ``None`` (default): every sampled client trains all its local steps. Not with ``hierarchy``.
        on_client_divergence: ``stop`` (default: a client whose loss or weights become NaN/inf stops
            the run with the round and client named) or ``drop`` (its update is discarded and named in
            the log, training goes on; a round where every client diverges still stops).
        resume_despite_changes: Resume a checkpoint even if this run's configuration differs from the one
            it was trained under (model, optimizer, local work, cohort, seed, data and partition, the
            algorithm and its arguments). Off by default: such a resume is an error naming the changed
            fields, because the result would not be the continuation of the checkpointed run.
        aggregation: The aggregation pipeline (:class:`~lightning_fl.aggregation.AggregationPipeline`):
            client-update transforms, a pre-aggregator, a combining rule (e.g. a robust one) and a server
            optimizer around the aggregation callback's weights (docs/architecture.md, Aggregation
            pipeline). ``None`` (default): the callback's own weighted mean and server step.
        attack: Simulated Byzantine clients (:class:`~lightning_fl.aggregation.attacks.Attack`: ``LabelFlip``,
            ``SignFlip``, ``Scale``, ``Gaussian``, ``ALIE``, ``IPM``), a fraction of all clients fixed from the
            seed; ``val/*`` and ``test/*`` then cover the honest clients and ``test/all/*`` everyone
            (docs/algorithms.md, Attacks (Byzantine clients)). ``None`` (default): no attack.
        dp: Client-level differential privacy (:class:`~lightning_fl.privacy.DifferentialPrivacy`), central or
            local, with ``dp/epsilon`` logged every round (docs/algorithms.md, Client-level differential privacy).
        eval: The declared evaluation protocol (:class:`~lightning_fl.personalization.EvalProtocol`, docs/personalization.md);
            ``None``: the global model on every client (personal models for FedRep, FedPer, FedBN, Local).
        cpu_threads: Intra-op threads for torch on CPU. ``None`` (auto) uses 1 thread for models under
            one million parameters: their per-step kernels are microseconds long, and a second thread
            makes each step wait on a barrier (10x slower when the machine is busy with other runs).

    Raises:
        ConfigError: On an invalid value, before training starts.

    Example (YAML)::

        model:
          client: {class_path: lightning_fl.models.LogisticRegression, init_args: {in_features: 60}}
          optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.01}}
          clients_per_round: 10
    """

    def __init__(
        self,
        client: LightningModule,
        optimizer: OptimizerCallable | None = None,
        clients_per_round: int = 10,
        local_epochs: int = 1,
        batch_size: int = 10,
        sampling: str = "uniform",
        seed: int = 0,
        engine: str = "auto",
        max_parallel_clients: int | None = None,
        hierarchy: Hierarchy | None = None,
        keep_client_optimizer_state: bool = False,
        eval_batch_size: int = 4096,
        cpu_threads: int | None = None,
        client_state: str = "memory",
        collective_timeout: float = 300.0,
        exchange: str = "gather",
        system: SystemHeterogeneity | None = None,
        on_client_divergence: str = "stop",
        resume_despite_changes: bool = False,
        aggregation: AggregationPipeline | None = None,
        attack: Attack | None = None,
        lr_scheduler: LRSchedulerCallable | None = None,
        lr_scheduler_interval: str = "round",
        dp: DifferentialPrivacy | None = None,
        eval: EvalProtocol | None = None,  # noqa: A002 (the config's name: model.eval)
    ) -> None:
        super().__init__()
        check_loop_arguments(client, clients_per_round=clients_per_round, local_epochs=local_epochs,
                             batch_size=batch_size, eval_batch_size=eval_batch_size, sampling=sampling, engine=engine,
                             client_state=client_state, max_parallel_clients=max_parallel_clients,
                             cpu_threads=cpu_threads)
        optimizer, lr_scheduler, lr_scheduler_interval, self._schedule_stand_in = client_optimizer(
            client, optimizer, lr_scheduler, lr_scheduler_interval)
        self.client_lr, self.client_momentum = probe_optimizer(optimizer)
        self.automatic_optimization = False
        # An empty parameter whose no-op optimizer step marks each round as one `global_step`, so
        # ModelCheckpoint/EarlyStopping (which count optimizer steps) see progress every round.
        self.server_step_marker = torch.nn.Parameter(torch.zeros(0))
        self.model = client
        self.optimizer_factory = optimizer
        self.clients_per_round = clients_per_round
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.sampling = sampling
        self.seed = seed
        self.engine_name = engine
        self.max_parallel_clients = max_parallel_clients
        self.hierarchy = hierarchy
        self.keep_client_optimizer_state = keep_client_optimizer_state
        self.eval_batch_size = eval_batch_size
        self.cpu_threads = cpu_threads
        self.client_state = client_state
        check_positive("collective_timeout", collective_timeout)
        check_choice("exchange", exchange, EXCHANGES)
        self.exchange = exchange
        check_choice("on_client_divergence", on_client_divergence, DIVERGENCE_POLICIES)
        if system is not None and hierarchy is not None:
            raise ConfigError("model.system cannot be combined with model.hierarchy (every client of every institution"
                              " trains each round there); remove one of them")
        check_hierarchy_options(hierarchy, clients_per_round, sampling)
        self.system = system
        self.on_client_divergence = on_client_divergence
        self.resume_despite_changes = resume_despite_changes
        self.aggregation = aggregation if aggregation is not None else AggregationPipeline()
        self.attack, self.dp = attack, dp
        self.eval_protocol = eval  # resolved at set-up (a personal model for FedRep, FedPer, FedBN, Local)
        self.lr_scheduler, self.lr_scheduler_interval = lr_scheduler, lr_scheduler_interval
        self.lr_schedule: ClientLrSchedule | None = None
        self.honest_clients: Tensor | None = None  # (N,) bool with an attack: whose metrics are the headline
        self._data_sha: str | None = None
        self.collective_timeout = float(collective_timeout)
        self.rounds_completed = 0
        self.run_outputs = RunOutputs()  # replaced in setup, once the run directory is known
        self.last_evaluation: ClientEvaluation | None = None
        self._pending_evaluations, self._pending_scalars = [], {}  # ClientEvaluations and gap scalars to log
        self._evaluated_round = -1  # the last round whose model was evaluated in this fit

    # ------------------------------------------------------------------ set-up
    @override
    def configure_callbacks(self) -> list[pl.Callback]:
        return callbacks_to_add(self.trainer)

    @override
    def setup(self, stage: str) -> None:
        # Atomic, checksummed checkpoints for CLI and Python runs alike; setup runs before ckpt_path loads.
        install_checkpoint_io(self.trainer.strategy)
        self.sharding = cohort_sharding(self.trainer, self.collective_timeout)
        self.run_outputs = RunOutputs.of_run(self.trainer)
        datamodule = self.trainer.datamodule
        if not isinstance(datamodule, FederatedDataModule):
            raise ConfigError("data must be a lightning_fl.datamodules.FederatedDataModule (e.g. lightning_fl.datamodules.SyntheticDataModule)")
        datamodule.setup(stage)
        data = datamodule.data  # every client's samples, or a lazy source (data.lazy: true) holding their sizes
        precision = str(self.trainer.precision)
        check_choice("trainer.precision", precision, SUPPORTED_PRECISIONS)
        if precision == "16-mixed" and self.trainer.strategy.root_device.type != "cuda":
            raise ConfigError("trainer.precision 16-mixed needs a GPU; use bf16-mixed or 32-true on CPU")
        # `samples`: what the engines set up and check on (client 0 alone when lazy); self.data: the federation.
        samples, self.data = set_up_data(self, data, stage, (check_finite_inputs, check_without_validation, check_setup))
        self.source = None if isinstance(data, FederatedData) else data
        self.model.to(self.trainer.strategy.root_device)  # Lightning moves modules after setup; the engines check now
        check_client(self.model, samples, self.batch_size)
        set_cpu_threads(self.trainer.strategy.root_device, self.model, self.cpu_threads)
        if self.hierarchy is not None:
            self.hierarchy.setup(data.num_clients, self.local_epochs)
        if self.attack is not None:  # B is fixed by the seed; label flippers train on flipped labels
            self.attack.setup(data.num_clients, self.seed, None if self.hierarchy is None else self.hierarchy.members)
            self.data, self.honest_clients = self.attack.poison(self.data), self.attack.honest_clients(data.num_clients)
        cohort = data.num_clients if self.hierarchy is not None else self.clients_per_round
        self.sampler = ClientSampler(data.num_clients, cohort, self.sampling, self.seed, data.sizes("train"))
        self.run_dir = Path(run_directory(self.trainer) or self.trainer.default_root_dir)  # a collective: every rank asks
        self.store = ClientStateStore(data.num_clients, self.keep_client_optimizer_state, client_state_dir(self.run_dir, self.client_state, self.trainer),
                                      self.run_dir)
        self.layout = FlatStateLayout(self.model.state_dict())
        if self.system is not None:
            self.system.setup(data.num_clients, self.seed, self.local_epochs, self.batch_size, data.sizes("train"),
                              model_bytes=self.layout.numel * 4)
        self.lr_schedule = ClientLrSchedule.build(self.lr_scheduler, self._schedule_stand_in or self.optimizer_factory,
                                                  self.lr_scheduler_interval)
        plan = LocalTrainingPlan(self.optimizer_factory, self.local_epochs, self.batch_size, self.seed,
                                 self.client_lr, precision, self.max_parallel_clients)
        self.engine: ClientEngine = build_engine(self.engine_name, plan, self.model, self.trainer.strategy.root_device)
        check_engine(self.engine, self.max_parallel_clients)
        self.engine.setup(self.model, samples, self.store, self.source)
        callbacks = [c for c in self.trainer.callbacks if isinstance(c, FederatedCallback)]
        aggregator = next(c for c in callbacks if isinstance(c, AggregationCallback))
        check_client_statistics(self.model, callbacks)
        self.protocol_evaluation = ProtocolEvaluation.for_run(
            self.eval_protocol, self.seed, self.sampler, model=self.model, data=self.data, layout=self.layout,
            engine=self.engine, store=self.store, aggregator=aggregator, batch_size=self.eval_batch_size,
            sharding=self.sharding)
        self.eval_protocol = self.protocol_evaluation.protocol
        self.federation = Federation(
            num_clients=data.num_clients, num_classes=data.num_classes, layout=self.layout,
            trainable=frozenset(n for n, p in self.model.named_parameters() if p.requires_grad),
            optimizer=ClientOptimizer(self.optimizer_factory, self.client_lr, self.client_momentum,
                                      self.keep_client_optimizer_state, self.lr_schedule),
            label_histograms=federation_label_histograms(data), train_sizes=data.sizes("train").cpu(),
            hierarchy=None if self.hierarchy is None else HierarchyView(tuple(self.hierarchy.members),
                                                                        self.hierarchy.local_rounds),
            aggregation=type(aggregator).__name__, device=self.trainer.strategy.root_device, seed=self.seed,
            batch_size=self.batch_size, clients_per_round=self.clients_per_round,
            global_model=(GlobalModelView if self.source is None else LazyGlobalModelView)(
                self.model, samples, self.layout, self.eval_batch_size, self.sharding),
            head_prefixes=head_prefixes(self.model), batchnorm_entries=batchnorm_entries(self.model),
            evaluated=self.protocol_evaluation.evaluated, evaluation=self.eval_protocol.describe(),
            eval_protocol=self.eval_protocol,
        )
        self.federated_callbacks = callbacks
        self.rounds = RoundRunner(self.model, self.engine, self.sampler, self.store, self.hierarchy, self.federation,
                                  callbacks, self.sharding, reduce=self.exchange == "reduce", system=self.system,
                                  on_client_divergence=self.on_client_divergence, pipeline=self.aggregation,
                                  attack=self.attack, dp=self.dp, rounds=self.trainer.max_epochs)
        self.rounds.setup_callbacks(training=stage == "fit", make_rows=disk_rows_factory(
            client_state_dir(self.run_dir, self.client_state, self.trainer), self.run_dir))

    @override
    def on_fit_start(self) -> None:
        report_dead_children(self.trainer)  # rank 0 of a ddp launch: a dead rank is named before all stop
        numel = sum(p.numel() for p in self.model.parameters())
        cohort = "every client" if self.hierarchy is not None or self.sampling == "all" else f"{self.clients_per_round}"
        rank_zero_info(f"Client model: {type(self.model).__name__}, {numel:,} parameters ({numel * 4 / 1e3:,.1f} kB"
                       f" in fp32); {self.data.num_clients} clients, {cohort} per round, {self.local_epochs} local"
                       f" epoch(s) of batch {self.batch_size}; client optimizer {self.federation.optimizer.describe()}"
                       f" at lr {self.client_lr:g}; engine {self.engine.name}")
        if self.trainer.is_global_zero:  # the HParams tab: this run's settings beside its fairness metrics
            # The rounds are the Trainer's (max_epochs), not part of the run's exactness check.
            write_hparams(self.loggers, self.federation.aggregation,
                          {**self._run_config(), "rounds": self.trainer.max_epochs, **self.eval_protocol.hparams()})
        if self.rounds_completed == 0:
            RoundLogger(self.loggers, step=0, outputs=self.run_outputs).log_partition(self.trainer.datamodule,
                                                                                      self._data_sha or "")

    @override
    def on_train_start(self) -> None:
        Preemption.instance().watch(self.trainer)  # a stop signal now ends the round in progress first

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        # Client optimizers are built per client by the engine from `optimizer`; this one only steps
        # the empty marker (lr 0), so that the Trainer's global_step counts rounds.
        return torch.optim.SGD([self.server_step_marker], lr=0.0)

    def _count_server_step(self) -> None:
        if getattr(self.trainer.precision_plugin, "scaler", None) is not None:
            # 16-mixed: the GradScaler steps only after it scaled a loss (an empty sum: a zero-size gradient)
            self.manual_backward(self.server_step_marker.sum())
        else:
            self.server_step_marker.grad = torch.zeros_like(self.server_step_marker)
        self.optimizers().step()

    # ------------------------------------------------------------------ one round
    @override
    def training_step(self, batch: Any, batch_idx: int) -> None:
        round_idx = self.current_epoch
        started = time.perf_counter()
        torch.manual_seed(derive_seed(self.seed, "torch", round_idx))  # dropout etc. replay on resume
        log = self.round_logger(round_idx + 1)
        if self.lr_schedule is not None:  # this round's client learning rate, in every engine
            log.log_scalars({"train/lr": self.lr_schedule.apply(self.engine, self.optimizer_factory)})
        result = self.rounds.run(round_idx, log)
        if self.lr_schedule is not None:
            self.lr_schedule.step()
        self.trainer.should_stop = self.trainer.should_stop or self.rounds.stop_requested  # model.dp.on_budget
        self._count_server_step()
        self.rounds_completed = round_idx + 1
        if result is None:  # an empty round (model.system): nothing trained, nothing to aggregate
            log.log_scalars({"round/seconds": time.perf_counter() - started, "round/clients": 0.0})
            return
        update = result.update
        weights = update.num_samples.double() / update.num_samples.sum()
        acc = float((weights * update.train_acc).sum())
        log.log_scalars({  # no train/acc when NaN: a plain LightningModule's training_step gives a loss only
            "train/loss": float((weights * update.train_loss).sum()), **({"train/acc": acc} if acc == acc else {}),
            "round/seconds": time.perf_counter() - started,
            "round/clients": float(result.traffic.transfers["client"]),
        }, prog_bar=("train/loss",))
        self.rounds.finish(result, log)

    # ------------------------------------------------------------------ logging
    def round_logger(self, step: int) -> RoundLogger:
        """A :class:`RoundLogger` at ``step`` whose scalars also reach ``callback_metrics``.

        Call it only from hooks where ``LightningModule.log`` is allowed (the round and evaluation).
        """
        return RoundLogger(self.loggers, step, self._monitor, self.run_outputs)

    def _monitor(self, name: str, value: float, prog_bar: bool) -> None:
        # logger=False: the loggers already got the value with the round as step.
        self.log(name, value, logger=False, prog_bar=prog_bar, batch_size=1)
