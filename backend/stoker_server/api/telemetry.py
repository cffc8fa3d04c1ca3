"""`/metrics` in Prometheus text format: live gauges per running run and GPU, server counters.

Each app has its own registry (tests start several apps in one process). The live gauges are
read at scrape time from `LiveGauges`, which ingest updates with every stored batch, so a
scrape never touches the database.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from stoker_server.ingest.protocol import Batch
from stoker_server.ingest.retention import DiskUsage
from stoker_server.ingest.writer import Writer
from stoker_server.live.agents import ConnectedAgents
from stoker_server.live.hub import LiveHub

# Device field → (Prometheus name, help) of the latest-value gauges per GPU. GPM fields and
# energy are absent (not 0) for GPUs that do not report them.
GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("util", "stoker_gpu_utilization_percent", "Latest GPU utilization"),
    ("mem_used", "stoker_gpu_memory_used_bytes", "Latest GPU memory used"),
    ("mem_total", "stoker_gpu_memory_total_bytes", "GPU memory size"),
    ("sm_util", "stoker_gpu_sm_active_percent", "Latest GPM SM utilization (share of SMs busy)"),
    ("sm_occupancy", "stoker_gpu_sm_occupancy_percent", "Latest GPM SM occupancy"),
    ("tensor_util", "stoker_gpu_tensor_active_percent", "Latest GPM any-tensor-pipe utilization"),
    ("dram_bw_util", "stoker_gpu_dram_bandwidth_percent", "Latest GPM DRAM bandwidth utilization"),
    ("fp16_util", "stoker_gpu_fp16_active_percent", "Latest GPM FP16 pipe utilization"),
    ("fp32_util", "stoker_gpu_fp32_active_percent", "Latest GPM FP32 pipe utilization"),
    ("energy_j", "stoker_gpu_energy_joules", "Energy the GPU drew since the run's first reading"),
)
# A reading whose GPM window stayed open (windows lined up with steps longer than the
# interval) has these null: their gauges keep the last closed window's value.
GPM_GAUGES = ("sm_util", "sm_occupancy", "tensor_util", "dram_bw_util", "fp16_util", "fp32_util")


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


@dataclass
class RunGauges:
    name: str
    project: str
    step_time_s: float | None = None
    input_wait_share: float | None = None
    steps: int = 0
    # (rank, gpu) → latest utilization %, memory used and total bytes
    gpus: dict[tuple[int, int], dict[str, float | None]] = field(default_factory=dict)


class LiveGauges(Collector):
    """The latest values of every running run this process receives batches for."""

    def __init__(self) -> None:
        self.runs: dict[int, RunGauges] = {}

    def started(self, run_id: int, *, name: str, project: str) -> None:
        self.runs.setdefault(run_id, RunGauges(name=name, project=project))

    def ended(self, run_id: int) -> None:
        self.runs.pop(run_id, None)

    def observe(self, run_id: int, *, rank: int, batch: Batch, steps_total: int) -> None:
        gauges = self.runs.get(run_id)
        if gauges is None:
            return
        gauges.steps = steps_total
        if batch.steps is not None and len(batch.steps):
            durations = batch.steps.dur
            duration_sum = sum(durations)
            gauges.step_time_s = duration_sum / len(durations)
            wait = batch.steps.wait
            if wait is not None and None not in wait:  # the usual case, summed in C
                wait_sum, total = sum(cast("list[float]", wait)), duration_sum
            else:
                waited = [
                    (w, d) for w, d in zip(wait or (), durations, strict=False) if w is not None
                ]
                wait_sum, total = sum(w for w, _ in waited), sum(d for _, d in waited)
            if total > 0:
                gauges.input_wait_share = min(1.0, wait_sum / total)
        if batch.device is not None:
            device = batch.device
            for i, gpu in enumerate(device.gpu):
                latest = {key: device.column(key)[i] for key, _, _ in GPU_GAUGES}
                before = gauges.gpus.get((rank, gpu), {})
                for key in GPM_GAUGES:
                    if latest[key] is None:
                        latest[key] = before.get(key)
                gauges.gpus[(rank, gpu)] = latest

    def collect(self) -> Iterator[GaugeMetricFamily]:
        run_labels = ["run_id", "run", "project"]
        gpu_labels = [*run_labels, "rank", "gpu"]
        step = GaugeMetricFamily(
            "stoker_run_step_time_seconds", "Mean step time of the latest batch", labels=run_labels
        )
        wait = GaugeMetricFamily(
            "stoker_run_input_wait_share",
            "Share of step time spent waiting for input (latest batch, 0..1)",
            labels=run_labels,
        )
        steps = GaugeMetricFamily("stoker_run_steps", "Steps stored for the run", labels=run_labels)
        families = [
            (key, GaugeMetricFamily(name, text, labels=gpu_labels))
            for key, name, text in GPU_GAUGES
        ]
        for run_id, g in list(self.runs.items()):
            labels = [str(run_id), g.name, g.project]
            steps.add_metric(labels, g.steps)
            if g.step_time_s is not None:
                step.add_metric(labels, g.step_time_s)
            if g.input_wait_share is not None:
                wait.add_metric(labels, g.input_wait_share)
            for (rank, gpu), values in list(g.gpus.items()):
                gl = [*labels, str(rank), str(gpu)]
                for key, family in families:
                    value = values.get(key)
                    if value is not None:
                        family.add_metric(gl, value)
        yield from (step, wait, steps)
        yield from (family for _, family in families)


class DiskGauges(Collector):
    """Disk use and retention, as the retention pass last measured them, and whether the
    writer refuses rows because the database's disk is full."""

    def __init__(self, usage: DiskUsage, writer: Writer) -> None:
        self.usage = usage
        self.writer = writer

    def collect(self) -> Iterator[GaugeMetricFamily]:
        u = self.usage
        database_free, database_total = u.database_space()
        for name, text, value in (
            ("stoker_disk_database_bytes", "Database size on disk", u.database_bytes),
            ("stoker_disk_profiles_bytes", "Stored profiler traces", u.profiles_bytes),
            ("stoker_disk_free_bytes", "Free space on the data directory's disk", u.free_bytes),
            ("stoker_disk_total_bytes", "Size of the data directory's disk", u.total_bytes),
            (
                "stoker_disk_database_free_bytes",
                "Free space on the database's own disk, where this server can see it",
                database_free,
            ),
            (
                "stoker_disk_database_total_bytes",
                "Size of the database's own disk, where this server can see it",
                database_total,
            ),
            (
                "stoker_retention_raw_bytes",
                "Estimated bytes of raw rows kept under retention_size_bytes",
                u.raw_bytes,
            ),
        ):
            if value is not None:
                yield GaugeMetricFamily(name, text, value=value)
        yield GaugeMetricFamily(
            "stoker_disk_full",
            "1 while the database's disk is full and new rows are refused (agents spool)",
            value=int(self.writer.disk_full),
        )
        yield GaugeMetricFamily(
            "stoker_disk_full_refusals",
            "Writes refused because the database's disk was full, since the server started",
            value=self.writer.disk_full_refusals,
        )
        yield GaugeMetricFamily(
            "stoker_retention_compacted_runs",
            "Runs compacted to rollups by this server since it started",
            value=u.compacted_runs,
        )
        yield GaugeMetricFamily(
            "stoker_retention_compacted_rows",
            "Raw rows reduced by compaction since the server started",
            value=u.compacted_rows,
        )


class Telemetry:
    """The server's own counters and the live gauges, in one registry per app.

    Args:
        agents: The agents connected here (their count is a gauge).
        hub: The browsers connected here (their count is a gauge).
        writer: Whether it refuses rows for a full disk.
        disk: The disk figures the retention pass measures.
    """

    def __init__(
        self, *, agents: ConnectedAgents, hub: LiveHub, writer: Writer, disk: DiskUsage
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.batches = Counter("stoker_ingest_batches", "Batches stored", registry=r)
        self.replays = Counter(
            "stoker_ingest_replayed_batches", "Batches already stored (acked again)", registry=r
        )
        self.rows = Counter("stoker_ingest_rows", "Rows stored", ["section"], registry=r)
        self.rejects = Counter(
            "stoker_ingest_rejects", "Frames or requests refused", ["reason"], registry=r
        )
        self.connections = Counter(
            "stoker_agent_connections", "Agent WebSocket connections accepted", registry=r
        )
        open_agents = Gauge("stoker_agent_connections_open", "Open agent connections", registry=r)
        open_agents.set_function(lambda: agents.total)
        browsers = Gauge("stoker_live_clients_open", "Open browser live connections", registry=r)
        browsers.set_function(lambda: hub.client_count)
        self.live = LiveGauges()
        r.register(self.live)
        self.disk = disk
        r.register(DiskGauges(disk, writer))

    def stored(self, batch: Batch) -> None:
        self.batches.inc()
        for section in ("steps", "metrics", "device", "host", "epochs"):
            columns = getattr(batch, section)
            if columns is not None and len(columns):
                self.rows.labels(section).inc(len(columns))

    def render(self) -> bytes:
        return generate_latest(self.registry)
