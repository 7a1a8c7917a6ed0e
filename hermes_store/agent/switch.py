"""``hermes-store agent enable|disable|status``: run Hermes Agent on this package (D15).

The switch is one file, :data:`HOOK_FILE`, in the site-packages folder that holds
hermes-agent. Python runs its ``import`` line at every start-up of that environment
(the CLI, the gateway, cron, every subprocess they spawn), and the line puts a
meta-path finder first on ``sys.meta_path``, ahead of the path entries that
``hermes_cli/main.py`` puts first, so ``import hermes_state`` finds
``hermes_store.agent.hermes_state`` whatever ``sys.path`` says (``_finder``).
``disable`` deletes the file, and the environment is as it was.

Everything about the agent's environment is learnt by running its interpreter
(:data:`_PROBE`, with ``-B`` so nothing is written there), because it is usually
another venv than the one running ``hermes-store``. Refusals are :class:`SwitchError`
subclasses, each with its own exit code.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..paths import expand_home
from ._finder import AGENT_DIST, NAME, OPT_OUT, TARGET, TESTED_AGENT_VERSIONS
HOOK_FILE = "hermes_store_agent.pth"
#: the first line of the hook: how `disable` and `status` know the file is ours
MARKER = "# hermes-store agent enable:"

EXIT_USAGE = 2  # --python is not a Python interpreter
EXIT_NO_AGENT = 3  # hermes-agent is not installed in that environment
EXIT_AGENT_VERSION = 9  # hermes-agent is a version the switch was not tested with
EXIT_NO_STORE = 10  # hermes_store cannot be imported in that environment
EXIT_ERROR = 8  # the hook could not be written, or does not take effect


def hook_text() -> str:
    """The whole hook file. Its one ``import`` line must stay one line (``site`` runs
    each such line on its own) and import nothing until ``hermes_state`` is asked for."""
    trampoline = (
        "import sys; sys.meta_path.insert(0, type('HermesStateHook', (), {'find_spec': "
        "staticmethod(lambda name, path=None, target=None: "
        f"__import__('hermes_store.agent._finder', fromlist=['find_spec']).find_spec(name, path, target) "
        f"if name == {NAME!r} else None)}}))"
    )
    return (
        f"{MARKER} processes of this environment import {TARGET} as {NAME}.\n"
        f"# Undo with `hermes-store agent disable` (or delete this file); {OPT_OUT}=off turns it\n"
        "# off for one process.\n"
        f"{trampoline}\n"
    )


# --------------------------------------------------------------------------- errors

class SwitchError(Exception):
    exit_code = EXIT_ERROR


class InterpreterError(SwitchError):
    exit_code = EXIT_USAGE


class AgentNotInstalledError(SwitchError):
    exit_code = EXIT_NO_AGENT


class AgentVersionError(SwitchError):
    exit_code = EXIT_AGENT_VERSION


class StoreNotImportableError(SwitchError):
    exit_code = EXIT_NO_STORE


# --------------------------------------------------------------------------- the environment

# Run by the target interpreter with -B (no bytecode written) from "/" (no folder of
# the caller's on sys.path). Prints one JSON document. Reads only.
_PROBE = r"""
import importlib.util, json, os, site, sys
HOOK, AGENT = sys.argv[1], sys.argv[2]
out = {"executable": sys.executable, "prefix": sys.prefix,
       "python": ".".join(map(str, sys.version_info[:3]))}
dirs = list(getattr(site, "getsitepackages", lambda: [])())
user = getattr(site, "getusersitepackages", lambda: None)()
if user and site.ENABLE_USER_SITE:
    dirs.append(user)
out["site_dirs"] = dirs
out["hooks"] = {d: open(os.path.join(d, HOOK), encoding="utf-8").read()
                for d in dirs if os.path.isfile(os.path.join(d, HOOK))}
out["hook_active"] = any(getattr(f, "__name__", None) == "HermesStateHook" for f in sys.meta_path)
try:
    from importlib.metadata import PackageNotFoundError, distribution
except ImportError:
    distribution = None
out["agent"] = None
if distribution is not None:
    try:
        dist = distribution(AGENT)
        out["agent"] = {"version": dist.version, "site": str(dist.locate_file(""))}
    except PackageNotFoundError:
        pass
try:
    import hermes_store
    out["store"] = {"version": hermes_store.__version__,
                    "location": os.path.dirname(hermes_store.__file__)}
except Exception as exc:
    out["store"] = None
    out["store_error"] = f"{type(exc).__name__}: {exc}"
try:
    spec = importlib.util.find_spec("hermes_state")
    out["hermes_state"] = spec.origin if spec is not None else None
except Exception as exc:
    out["hermes_state"] = None
    out["hermes_state_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass
class Environment:
    """What the probe learnt about one Python environment."""

    python: str  # as given (or this interpreter)
    executable: str
    prefix: str
    python_version: str
    site_dirs: list[str]
    hooks: dict[str, str]  # site dir -> the hook file's text, where one is
    hook_active: bool  # a process of the environment starts with the hook
    agent_version: str | None
    agent_site: str | None
    store_version: str | None
    store_location: str | None
    store_error: str | None
    hermes_state: str | None  # the file `import hermes_state` would load
    hermes_state_error: str | None = None

    @property
    def agent_tested(self) -> bool:
        return self.agent_version in TESTED_AGENT_VERSIONS

    @property
    def hook_path(self) -> Path | None:
        """Where :data:`HOOK_FILE` goes: beside hermes-agent's own distribution."""
        return Path(self.agent_site) / HOOK_FILE if self.agent_site else None

    @property
    def enabled(self) -> bool:
        return self.hook_active and self.hermes_state_is_ours

    @property
    def hermes_state_is_ours(self) -> bool:
        if not self.hermes_state:
            return False
        return Path(self.hermes_state).parts[-3:] == ("hermes_store", "agent", "hermes_state.py")

    @property
    def install_hint(self) -> str:
        return f"{shlex.quote(self.python)} -m pip install hermes_store"


def probe(python: str | os.PathLike | None = None) -> Environment:
    """Run the environment's interpreter once and read what it reports."""
    given = str(python) if python is not None else sys.executable
    # absolute (the probe runs from "/"), never resolved: a venv's python is a symlink
    exe = shutil.which(given) if os.sep not in given else os.path.abspath(given)
    if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise InterpreterError(f"--python {given}: no such executable")
    env = {k: v for k, v in os.environ.items() if k != OPT_OUT}
    try:
        run = subprocess.run([exe, "-B", "-c", _PROBE, HOOK_FILE, AGENT_DIST], capture_output=True,
                             text=True, cwd="/", env=env, timeout=120)
    except OSError as exc:
        raise InterpreterError(f"--python {given}: cannot run it ({exc})") from None
    try:
        data = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        detail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise InterpreterError(
            f"--python {given} is not a Python interpreter this command can use "
            f"(exit {run.returncode}: {detail})") from None
    agent = data["agent"] or {}
    store = data["store"] or {}
    return Environment(
        python=given, executable=data["executable"], prefix=data["prefix"],
        python_version=data["python"], site_dirs=data["site_dirs"], hooks=data["hooks"],
        hook_active=data["hook_active"], agent_version=agent.get("version"),
        agent_site=agent.get("site"), store_version=store.get("version"),
        store_location=store.get("location"), store_error=data.get("store_error"),
        hermes_state=data.get("hermes_state"), hermes_state_error=data.get("hermes_state_error"),
    )


def _hermes_on_path_hint() -> str:
    """`--python …` for the ``hermes`` command on PATH, read from its shebang line."""
    found = shutil.which("hermes")
    if not found:
        return ""
    try:
        with open(found, "rb") as fh:
            first = fh.readline(4096).decode(errors="replace").strip()
    except OSError:
        return ""
    if first.startswith("#!") and "python" in first:
        return f" The `hermes` on PATH runs {first[2:].split()[0]}: pass --python with that."
    return ""


def check_agent(env: Environment) -> None:
    """Refuse an environment the switch cannot serve (the agent missing, a version not
    tested, hermes_store not importable there)."""
    where = f"{env.prefix} (Python {env.python_version}, {env.executable})"
    if env.agent_version is None:
        raise AgentNotInstalledError(
            f"hermes-agent is not installed in {where}; nothing to switch. Name the "
            "agent's interpreter with --python PATH." + _hermes_on_path_hint())
    if not env.agent_tested:
        tested = ", ".join(TESTED_AGENT_VERSIONS)
        raise AgentVersionError(
            f"hermes-agent {env.agent_version} is installed in {env.prefix}, but this "
            f"hermes_store was tested with hermes-agent {tested} only: the agent's use of "
            f"hermes_state may differ, so the switch stays off. Install {tested} there "
            f"({shlex.quote(env.python)} -m pip install hermes-agent=={TESTED_AGENT_VERSIONS[-1]}) "
            "or a hermes_store release that names your version.")
    if env.store_version is None:
        raise StoreNotImportableError(
            f"hermes_store cannot be imported in {where} ({env.store_error}); the agent's "
            f"processes would fail to import hermes_state. Install it there first: "
            f"{env.install_hint}")


# --------------------------------------------------------------------------- enable / disable

@dataclass
class Change:
    """What enable or disable did."""

    action: str  # "enabled", "already enabled", "updated", "disabled", "already disabled"
    paths: list[str] = field(default_factory=list)
    environment: Environment | None = None
    #: disable: the agent's file made readable by its own module (prompts inline)
    prompts: dict | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("environment")
        return d


def _write_atomically(path: Path, text: str) -> None:
    # Not named *.pth until complete: a process starting meanwhile must not run half a line.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def enable(python: str | os.PathLike | None = None) -> Change:
    """Install the hook in the agent's environment (idempotent)."""
    env = probe(python)
    check_agent(env)
    path = env.hook_path
    text = hook_text()
    if env.hooks.get(str(path.parent)) == text and env.enabled:
        return Change("already enabled", [str(path)], env)
    action = "updated" if path.exists() else "enabled"
    try:
        _write_atomically(path, text)
    except OSError as exc:
        raise SwitchError(f"cannot write {path}: {exc.strerror or exc}. Run the command as "
                          "the user who installed hermes-agent there.") from None
    after = probe(python)
    if not after.enabled:  # e.g. a folder Python does not read .pth files from
        path.unlink(missing_ok=True)
        why = after.hermes_state_error or f"`import {NAME}` still finds {after.hermes_state}"
        raise SwitchError(f"the hook in {path} does not take effect ({why}); removed it again.")
    return Change(action, [str(path)], after)


def disable(python: str | os.PathLike | None = None, environ=os.environ) -> Change:
    """Remove the hook from every site folder of the environment (idempotent). Works
    whatever the agent's state (even uninstalled), and only on files that are ours.
    Then the agent's file keeps its prompts where the agent's own module reads them."""
    env = probe(python)
    removed = []
    for folder, text in env.hooks.items():
        path = Path(folder) / HOOK_FILE
        if not text.startswith(MARKER):
            raise SwitchError(f"{path} was not written by hermes-store (its first line is "
                              "not the switch's); left it in place.")
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise SwitchError(f"cannot remove {path}: {exc.strerror or exc}") from None
        removed.append(str(path))
    return Change("disabled" if removed else "already disabled", removed, env,
                  prompts=_readable_by_the_agents_own_module(environ))


def _readable_by_the_agents_own_module(environ) -> dict | None:
    """Give every session of the agent's file its system prompt inline again, the only
    place hermes-agent 0.19.0 reads it (``prompts.keep_file_readable_by_pre_v25``): the
    file hermes_store wrote, or one copied back from PostgreSQL. Only a file at this
    package's head is touched (an upstream file, never opened here, is left as it is);
    a failure is reported, and the switch is off all the same."""
    info = agent_store(environ)
    if info.get("backend") != "sqlite" or not info.get("at_head"):
        return None
    from .prompts import keep_file_readable_by_pre_v25

    try:
        refilled = keep_file_readable_by_pre_v25(Path(info["store"]))
    except Exception as exc:
        return {"store": info["store"], "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    return {"store": info["store"], "refilled": refilled}


# --------------------------------------------------------------------------- status

URL_ENV = "HERMES_STATE_DATABASE_URL"


def _dotenv_value(path: Path, key: str) -> str | None:
    """``key``'s value in a dotenv file (``KEY=value``, ``export KEY=value``, quoted or
    not): the agent loads ``$HERMES_HOME/.env`` into its environment at start-up, over
    what the shell exported."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        if not sep or name.strip() != key:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].strip()
        found = value
    return found


def agent_home(environ=os.environ) -> tuple[Path, str]:
    """The ``HERMES_HOME`` the agent's CLI will use, and why: ``$HERMES_HOME`` (else
    ``~/.hermes``), or the profile that ``<root>/active_profile`` names (as hermes-agent
    0.19.0 picks it at start-up)."""
    given = environ.get("HERMES_HOME", "").strip()
    root = expand_home(given) if given else Path.home() / ".hermes"
    if given and root.parent.name == "profiles":
        return root, "HERMES_HOME"
    try:
        name = (root / "active_profile").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        name = ""
    if name and name != "default" and (root / "profiles" / name).is_dir():
        return root / "profiles" / name, f"active profile {name!r}"
    return root, "HERMES_HOME" if given else "HERMES_HOME unset"


def agent_store(environ=os.environ) -> dict:
    """Which store the agent's processes will open, and whether it is at head."""
    from ..location import resolve

    home, home_source = agent_home(environ)
    url = _dotenv_value(home / ".env", URL_ENV)
    source = f"{URL_ENV} in {home / '.env'}" if url else None
    if not url and environ.get(URL_ENV, "").strip():
        url, source = environ[URL_ENV].strip(), f"{URL_ENV} (environment)"
    info: dict = {"hermes_home": str(home), "hermes_home_source": home_source}
    try:
        target = resolve(url) if url else resolve(home / "state.db")
    except Exception as exc:  # a URL that cannot be used: say so, do not fall back
        info.update(store=None, source=source, error=str(exc))
        return info
    info.update(store=target.display, backend=target.backend,
                source=source or f"no {URL_ENV}: the file in HERMES_HOME")
    try:
        info.update(_where_it_stands(target))
    except Exception as exc:  # a server that cannot be reached, a damaged file: say so
        info.update(exists=None, error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return info


def _where_it_stands(target) -> dict:
    """Whether the store exists and its revision against head, read without writing (the
    backend's migration state; a database the server does not have is missing)."""
    from .. import errors, migrate

    head = migrate.head()
    try:
        found = migrate.state(target)
    except errors.StoreNotFoundError:
        return {"exists": False, "revision": None, "head": head, "at_head": False}
    exists = found.kind != "missing"
    return {"exists": exists, "revision": found.revision, "head": head,
            "at_head": exists and found.revision == head}


def status(python: str | os.PathLike | None = None, environ=os.environ) -> dict:
    """Everything ``agent status`` shows, and the exit code it ends with (that of the
    refusal ``enable`` would give, else 0)."""
    env = probe(python)
    refusal = None
    try:
        check_agent(env)
    except SwitchError as exc:
        refusal = exc
    hooks = {d: t.startswith(MARKER) and t == hook_text() for d, t in env.hooks.items()}
    return {
        "python": env.executable,
        "environment": env.prefix,
        "python_version": env.python_version,
        "agent_version": env.agent_version,
        "agent_tested": env.agent_tested,
        "tested_versions": list(TESTED_AGENT_VERSIONS),
        "store_package": env.store_version,
        "store_package_location": env.store_location,
        "store_package_error": env.store_error,
        "enabled": env.enabled,
        "hook_files": [str(Path(d) / HOOK_FILE) for d in env.hooks],
        "hook_current": all(hooks.values()) if hooks else None,
        "hermes_state": env.hermes_state,
        "hermes_state_is_ours": env.hermes_state_is_ours,
        "hermes_state_error": env.hermes_state_error,
        "problem": str(refusal) if refusal else None,
        "exit_code": refusal.exit_code if refusal else 0,
        **agent_store(environ),
    }
