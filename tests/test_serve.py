"""``kwtree serve``: a directory's server answers the reading commands and hooks exactly as the
commands would answer by themselves, sees other processes' writes, never stands in the way (a
dead, stale, declining or foreign server leaves the command to run by itself), and goes away when
idle, asked, or when the directory is no longer its tree.

Real processes throughout: the server is ``python -m kwtree serve`` and each command a fresh
``python -m kwtree`` (or the command's entry in a probe that reports which modules it loaded:
a command the server answered never imports the library)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import bench_module, tmpfs

from kwtree import KeywordTree
from kwtree.cli import rendezvous
from kwtree.cli.main import COMMANDS

#: Reading commands a server does not answer, and why (the rest of the reading ones it does).
NOT_SERVED = {
    "tree": "prints through rich, in colour on a terminal the server does not have",
    "search": "may call the agent's LLM, which the command's environment chooses",
    "reorganize": "calls the agent's LLM and may write --out FILE",
    "snapshot": "writes a file",
    "export": "writes a file",
}
PROBE = ("import json, sys\nfrom kwtree.cli.entry import main\ncode = main(sys.argv[1:])\nsys.stdout.flush()\n"
         "print(json.dumps(sorted(sys.modules)), file=sys.__stderr__)\nsys.exit(code)")
HOOK_PROMPT = json.dumps({"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "what tea do I like?"})
HOOK_START = json.dumps({"session_id": "s2", "hook_event_name": "SessionStart", "source": "startup"})


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A private rendezvous directory, short enough for a socket's path."""
    path = Path(tempfile.mkdtemp(prefix="kws", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(runtime: Path, mode: str = "use") -> dict[str, str]:
    return {**os.environ, "KWTREE_SERVE": mode, "XDG_RUNTIME_DIR": str(runtime)}


def _fill(directory: Path) -> None:
    with KeywordTree(directory, durability="none") as tree:
        tools = tree.create_keyword("Tools", llm_auto_place=False)
        python = tree.create_keyword("Python", tools.id, ["py"], "the language")
        tree.create_info("Uses uv to manage Python environments.", "chat", [python.id])
        tree.create_info("Retries of failed invoices happen nightly.", "chat", [tools.id])
        tree.memory.commit_session([{"role": "user", "content": "Hi, I'm Alice. I love green tea."}],
                                   scope="user:alice", session_id="intro")
        assert tree.wait_indexed(60)  # (else the server would embed them while the answers are compared)


class Server:
    """``kwtree serve DIR`` in its own process, ready once it says it is serving."""

    def __init__(self, directory: Path, runtime: Path, *extra: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "kwtree", "serve", str(directory), *extra],
                                     env=_env(runtime), stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        self.first = ""  # what it said up to "serving" (what opening the tree logged comes first)
        while line := self.proc.stderr.readline():
            self.first += line
            if "serving" in line:
                break

    def ready(self) -> Server:
        assert "serving" in self.first, self.first + self.rest()
        return self

    def rest(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def served(tmp_path: Path, runtime: Path) -> Iterator[tuple[Path, Path, Server]]:
    directory = tmp_path / "tree"
    _fill(directory)
    server = Server(directory, runtime, "--idle", "120").ready()
    yield directory, runtime, server
    server.kill()


def kwtree(runtime: Path, *argv: str, mode: str = "use", stdin: str = "", cwd: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kwtree", *argv], input=stdin, env=_env(runtime, mode),
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def probe(runtime: Path, *argv: str, stdin: str = "", mode: str = "use", cwd: Path | None = None
          ) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run a command through the entry; whether a server answered it (the library never loaded)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], input=stdin, env=_env(runtime, mode),
                          capture_output=True, text=True, timeout=120, cwd=cwd)
    *err, modules = done.stderr.splitlines()
    done.stderr = "".join(f"{line}\n" for line in err)
    return done, "kwtree.facade.tree" not in json.loads(modules)


# --- which commands -----------------------------------------------------------------------------


def test_the_served_commands_are_the_reading_commands_that_need_no_llm_and_write_no_file() -> None:
    reading = {c.name for c in COMMANDS if c.opens == "read"}
    assert set(rendezvous.SERVED) == reading - set(NOT_SERVED)
    assert set(NOT_SERVED) <= reading
    assert set(rendezvous.SERVED.values()) == {1}  # DIR first, as the reading bundle puts it
    hook = next(c for c in COMMANDS if c.name == "hook")
    events = next(options["choices"] for flags, options in hook.args if flags == ("event",))
    assert set(rendezvous.SERVED_HOOKS) == set(events)  # (stop: only offline, as the hooks' actor)


@pytest.mark.parametrize(("argv", "directory"), [
    (["recall", "DIR", "q"], "DIR"),
    (["hook", "prompt", "DIR"], "DIR"),
    (["hook", "session-start", "DIR", "--scope", "user:a"], "DIR"),
    (["hook", "stop", "DIR"], "DIR"),
    (["hook", "stop"], None),
    (["recall", "--k", "3", "DIR", "q"], None),  # options first: argparse's to read, here
    (["recall", "DIR", "q", "--as-of", "2024-01-01"], None),
    (["recall", "DIR", "--help"], None),
    (["add", "DIR", "x"], None),
    (["search", "DIR", "x"], None),
    (["recall"], None),
    ([], None),
])
def test_a_command_goes_to_a_server_only_in_its_plain_form(argv: list[str], directory: str | None) -> None:
    assert rendezvous.served_directory(argv) == directory


# --- the same answers -------------------------------------------------------------------------------


SAME_ANSWERS = [
    ("recall", "DIR", "green tea", "--k", "3"),
    ("recall", "DIR", "invoices", "--json"),
    ("recall", "DIR", "tea", "--scope", "user:alice", "--mode", "bm25"),
    ("context", "DIR", "python environments", "--max-tokens", "200"),
    ("get", "DIR", "py"),
    ("get", "DIR", "Tools/Python", "--json"),
    ("get", "DIR", "no such keyword"),  # an error: exit 1, the message and a hint on stderr
    ("children", "DIR", "root"),
    ("path", "DIR", "Python"),
    ("find", "DIR", "PY"),
    ("infos", "DIR", "Python"),
    ("relations", "DIR", "Python", "--direction", "both"),
    ("assemble", "DIR", "what tea?", "--scope", "user:alice"),
    ("bootstrap", "DIR", "--scope", "user:alice"),
    ("memories", "DIR", "--scope", "user:alice"),
    ("history", "DIR", "--limit", "3"),
    ("metrics", "DIR", "--json"),
    ("recall", "DIR", "q", "--k", "not-a-number"),  # a usage error: exit 2, argparse's message
    ("recall", "DIR", "q", "--as", "2024-01-01"),  # argparse's abbreviation of --as-of: the server declines
]


@pytest.mark.parametrize("argv", SAME_ANSWERS, ids=[" ".join(a) for a in SAME_ANSWERS])
def test_a_served_command_prints_and_exits_as_the_command_itself(served: tuple[Path, Path, Server],
                                                                 argv: tuple[str, ...]) -> None:
    directory, runtime, _ = served
    args = [str(directory) if a == "DIR" else a for a in argv]
    alone = kwtree(runtime, *args, mode="off")
    answered, by_server = probe(runtime, *args)
    assert (answered.returncode, answered.stdout, answered.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    assert by_server == ("--as" not in argv)


@pytest.mark.parametrize(("event", "payload"), [("prompt", HOOK_PROMPT), ("session-start", HOOK_START)])
def test_a_served_hook_prints_what_the_hook_itself_prints(served: tuple[Path, Path, Server], event: str,
                                                          payload: str) -> None:
    directory, runtime, _ = served
    args = ("hook", event, str(directory), "--scope", "user:alice")
    alone = kwtree(runtime, *args, mode="off", stdin=payload)
    answered, by_server = probe(runtime, *args, stdin=payload)
    assert by_server and alone.returncode == 0 and "green tea" in alone.stdout
    assert (answered.returncode, answered.stdout, answered.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    bad, by_server = probe(runtime, *args, stdin="not json")  # its error, as the hook reports it
    alone = kwtree(runtime, *args, mode="off", stdin="not json")
    assert by_server and (bad.returncode, bad.stderr) == (1, alone.stderr)


def _transcript(path: Path, turns: int) -> Path:
    """A Claude Code transcript of ``turns`` exchanges (JSONL, as the Stop hook reads it)."""
    lines = []
    for turn in range(turns):
        for role, text in (("user", f"I started learning instrument number {turn} last week."),
                           ("assistant", "Nice, enjoy it.")):
            content = text if role == "user" else [{"type": "text", "text": text}]
            lines.append(json.dumps({"type": role, "message": {"role": role, "content": content},
                                     "sessionId": "cc-9", "timestamp": f"2024-05-08T10:0{turn}:00.000Z"}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _stop_input(transcript: Path | str) -> str:
    return json.dumps({"session_id": "cc-9", "transcript_path": str(transcript), "hook_event_name": "Stop"})


def _memories(directory: Path) -> list[tuple[str, str, str]]:
    """What the tree holds of the hook's session: each live info's text, and each operation's kind and actor."""
    with KeywordTree(directory, read_only=True, worker=False) as tree:
        texts = sorted(info.content for kid in [k.id for k in tree.find_keywords("cc-9")]
                       for info in tree.get_infos_of_keyword(kid))
        return [*(("info", text, "") for text in texts),
                *((op.kind, op.actor, "") for op in tree.history() if op.kind == "commit_session")]


def test_a_served_stop_hook_commits_what_the_hook_itself_commits(served: tuple[Path, Path, Server],
                                                                 tmp_path: Path) -> None:
    """Offline, the Stop hook's commit is the server's to make (idempotent: each Stop commits only
    the turns the last did not, so a stop run again after a server that died before replying
    commits nothing twice): the same operation, actor and memories as the hook alone."""
    directory, runtime, _ = served
    alone_dir = tmp_path / "alone"
    shutil.copytree(directory, alone_dir)
    transcript = tmp_path / "transcript.jsonl"
    for turns in (1, 2, 2):  # the last: nothing new
        _transcript(transcript, turns)
        alone = kwtree(runtime, "hook", "stop", str(alone_dir), "--scope", "user:alice", mode="off",
                       stdin=_stop_input(transcript))
        served_run, by_server = probe(runtime, "hook", "stop", str(directory), "--scope", "user:alice",
                                      stdin=_stop_input(transcript))
        assert by_server and (served_run.returncode, served_run.stdout, served_run.stderr) == (
            alone.returncode, alone.stdout, alone.stderr) == (0, "", "")
    assert _memories(directory) == _memories(alone_dir)
    assert [actor for kind, actor, _ in _memories(directory) if kind == "commit_session"] == ["user", "agent", "agent"]
    missing, by_server = probe(runtime, "hook", "stop", str(directory), stdin=_stop_input(tmp_path / "gone.jsonl"))
    alone = kwtree(runtime, "hook", "stop", str(alone_dir), mode="off", stdin=_stop_input(tmp_path / "gone.jsonl"))
    assert by_server and (missing.returncode, missing.stderr.replace(str(directory), "D")) == (
        1, alone.stderr.replace(str(alone_dir), "D"))


def test_a_stop_hook_runs_by_itself_with_an_llm_another_actor_or_a_relative_transcript(
        tmp_path: Path, runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's tree has no LLM client and writes as the hooks' actor, and it does not
    run in the command's directory: those stops are the command's own."""
    monkeypatch.setenv("KWTREE_LLM", "openai")  # (the server is started with it too: same endpoint)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # refused at once: the commit goes offline
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("KWTREE_OPENAI_MODEL", "test-model")
    directory = tmp_path / "tree"
    _fill(directory)
    transcript = _transcript(tmp_path / "transcript.jsonl", 1)
    server = Server(directory, runtime, "--idle", "120").ready()
    try:
        done, by_server = probe(runtime, "hook", "stop", str(directory), stdin=_stop_input(transcript))
        assert not by_server and done.returncode == 0 and "the LLM failed" in done.stderr
        monkeypatch.delenv("KWTREE_LLM")
    finally:
        server.kill()
    server = Server(directory, runtime, "--idle", "120").ready()
    try:
        for turns, actor, where in ((2, "claude", transcript), (3, "agent", Path("transcript.jsonl"))):
            _transcript(transcript, turns)  # (a turn more each time: each stop commits)
            done, by_server = probe(runtime, "hook", "stop", str(directory), "--actor", actor,
                                    stdin=_stop_input(where), cwd=tmp_path)
            assert not by_server and done.returncode == 0, done.stderr
            with KeywordTree(directory, read_only=True, worker=False) as tree:
                assert tree.history()[-1].actor == actor
    finally:
        server.kill()


def test_a_relative_directory_is_read_from_the_command_s_working_directory(served: tuple[Path, Path, Server]) -> None:
    directory, runtime, _ = served
    answered, by_server = probe(runtime, "recall", directory.name, "uv", cwd=directory.parent)
    assert by_server and answered.returncode == 0 and "Uses uv" in answered.stdout


def test_several_commands_at_once_each_get_their_own_answer(served: tuple[Path, Path, Server]) -> None:
    directory, runtime, _ = served
    queries = {"uv": "Uses uv", "invoices": "Retries of failed", "green tea": "green tea"}
    results: dict[str, tuple[subprocess.CompletedProcess[str], bool]] = {}
    threads = [threading.Thread(target=lambda q=q: results.__setitem__(q, probe(runtime, "recall", str(directory), q)))
               for q in queries for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for query, expected in queries.items():
        done, by_server = results[query]
        assert by_server and expected in done.stdout.splitlines()[0]


# --- fresh, and never in the way --------------------------------------------------------------------


def test_a_served_read_sees_what_another_process_wrote_since(served: tuple[Path, Path, Server]) -> None:
    directory, runtime, _ = served
    before, by_server = probe(runtime, "recall", str(directory), "kayak")
    assert by_server and "kayak" not in before.stdout
    wrote = kwtree(runtime, "add-info", str(directory), "Goes kayaking on Sundays.", "--keyword", "Tools")
    assert wrote.returncode == 0, wrote.stderr
    after, by_server = probe(runtime, "recall", str(directory), "kayaking")
    assert by_server and "Goes kayaking on Sundays." in after.stdout


def test_a_server_declines_what_it_was_not_opened_for(served: tuple[Path, Path, Server], tmp_path: Path) -> None:
    import socket

    directory, runtime, _ = served
    other = tmp_path / "other"
    _fill(other)
    os.environ["XDG_RUNTIME_DIR"], saved = str(runtime), os.environ.get("XDG_RUNTIME_DIR")
    try:
        where = rendezvous.endpoint(directory)
    finally:
        if saved is None:
            del os.environ["XDG_RUNTIME_DIR"]
        else:
            os.environ["XDG_RUNTIME_DIR"] = saved
    assert where is not None
    for request in ({"argv": ["recall", str(other), "uv"], "cwd": "/", "stdin": None},  # another tree
                    {"argv": ["add", str(directory), "X"], "cwd": "/", "stdin": None},  # a write
                    {"argv": "recall", "cwd": "/"}):  # not a request
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(where.socket)
            rendezvous.send(conn, request)
            assert "declined" in rendezvous.receive(conn)


def test_a_killed_server_leaves_nothing_in_the_way(served: tuple[Path, Path, Server]) -> None:
    directory, runtime, server = served
    server.proc.send_signal(signal.SIGKILL)
    server.wait()
    assert list(runtime.glob("kwtree-*/*.sock"))  # its socket is still there, and nobody answers
    done, by_server = probe(runtime, "recall", str(directory), "uv")
    assert not by_server and done.returncode == 0 and "Uses uv" in done.stdout
    again = Server(directory, runtime).ready()  # the next server takes the place
    try:
        assert probe(runtime, "recall", str(directory), "uv")[1]
    finally:
        again.kill()


def test_a_replaced_directory_is_never_answered_from_the_old_tree(served: tuple[Path, Path, Server]) -> None:
    directory, runtime, server = served
    shutil.rmtree(directory)
    with KeywordTree(directory, durability="none") as tree:
        tree.create_info("A different tree altogether.", "chat")
    done, _ = probe(runtime, "recall", str(directory), "uv")
    assert done.returncode == 0 and "Uses uv" not in done.stdout
    assert server.wait() == 0  # the server saw it was no longer its tree, and left
    assert not list(runtime.glob("kwtree-*/*.sock"))


def test_a_second_server_of_the_same_directory_exits_at_once(served: tuple[Path, Path, Server]) -> None:
    directory, runtime, _ = served
    second = Server(directory, runtime)
    assert second.wait() == 0 and "already serves" in second.first + second.rest()


def test_status_says_what_the_server_did(served: tuple[Path, Path, Server]) -> None:
    directory, runtime, server = served
    assert probe(runtime, "recall", str(directory), "uv")[1]
    assert not probe(runtime, "recall", str(directory), "uv", "--as", "2024-01-01")[1]  # declined
    status = json.loads(kwtree(runtime, "serve", str(directory), "--status", "--json").stdout)
    assert (status["pid"], status["answered"], status["declined"]) == (server.proc.pid, 1, 1)
    assert status["directory"] == os.path.realpath(directory) and status["embeds"] is True
    text = kwtree(runtime, "serve", str(directory), "--status").stdout
    assert text.startswith(f"serving {os.path.realpath(directory)}: pid {server.proc.pid}") and "120 s idle" in text
    kwtree(runtime, "serve", str(directory), "--stop")
    server.wait()
    assert kwtree(runtime, "serve", str(directory), "--status").stdout == f"no server serves {directory}\n"


def test_stop_asks_the_server_to_leave(served: tuple[Path, Path, Server]) -> None:
    directory, runtime, server = served
    stopped = kwtree(runtime, "serve", str(directory), "--stop")
    assert stopped.returncode == 0 and "stopped the server" in stopped.stdout
    assert server.proc.poll() is not None or server.wait(5) == 0  # gone when --stop returns (or all but)
    assert not list(runtime.glob("kwtree-*/*.sock"))
    after = Server(directory, runtime, "--idle", "60").ready()  # its place is free at once
    after.kill()
    assert "no server serves" in kwtree(runtime, "serve", str(directory), "--stop").stdout


def test_an_idle_server_stops_by_itself(tmp_path: Path, runtime: Path) -> None:
    _fill(tmp_path / "tree")
    server = Server(tmp_path / "tree", runtime, "--idle", "1").ready()
    assert server.wait() == 0 and "stopped serving" in server.rest()
    assert not list(runtime.glob("kwtree-*/*.sock"))


@pytest.mark.parametrize("idle", [None, "0"])
def test_the_second_command_starts_the_server_the_third_uses(tmp_path: Path, runtime: Path, idle: str | None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A single read leaves no process behind; a second one within the idle time starts the
    server, in the background, and the next command is answered by it. With no idle limit
    (``KWTREE_SERVE_IDLE=0``: never stops) the second one ever does (it never did: review)."""
    if idle is not None:
        monkeypatch.setenv("KWTREE_SERVE_IDLE", idle)
    directory = tmp_path / "tree"
    _fill(directory)
    first, by_server = probe(runtime, "recall", str(directory), "uv", mode="auto")
    assert not by_server and "Uses uv" in first.stdout
    # (a command that starts a server makes its log before it exits: no log, no server started)
    assert not list(runtime.glob("kwtree-*/*.log"))
    again, by_server = probe(runtime, "recall", str(directory), "uv", mode="auto")
    assert not by_server and again.stdout == first.stdout
    deadline = time.monotonic() + 60
    while not list(runtime.glob("kwtree-*/*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        second, by_server = probe(runtime, "recall", str(directory), "uv", mode="auto")
        assert by_server and second.stdout == first.stdout
    finally:
        assert "stopped the server" in kwtree(runtime, "serve", str(directory), "--stop").stdout


def test_a_server_started_from_a_relative_pythonpath_runs_the_command_s_kwtree(tmp_path: Path, runtime: Path) -> None:
    """The server starts in "/" (it must not hold the command's directory busy): a relative
    ``PYTHONPATH`` would have it import another kwtree there, whose server listens where no
    command of this one looks, holding the tree open for nothing (review)."""
    import kwtree

    shutil.copytree(Path(kwtree.__file__).parent, tmp_path / "pkg" / "kwtree",
                    ignore=shutil.ignore_patterns("__pycache__"))
    directory = tmp_path / "tree"
    _fill(directory)
    env = {**_env(runtime, "auto"), "PYTHONPATH": "pkg"}
    seen = []
    try:
        for _ in range(3):
            done = subprocess.run([sys.executable, "-c", PROBE, "recall", str(directory), "uv"], env=env,
                                  capture_output=True, text=True, timeout=120, cwd=tmp_path)
            assert "Uses uv" in done.stdout, done.stderr
            seen.append("kwtree.facade.tree" not in json.loads(done.stderr.splitlines()[-1]))
            if len(seen) == 2:  # (the second started a server: wait for it to listen)
                deadline = time.monotonic() + 60
                while not list(runtime.glob("kwtree-*/*.sock")) and time.monotonic() < deadline:
                    time.sleep(0.1)
        assert seen == [False, False, True]
    finally:
        subprocess.run([sys.executable, "-m", "kwtree", "serve", str(directory), "--stop"], env=env, cwd=tmp_path,
                       capture_output=True, timeout=120)


def test_no_server_is_started_for_a_minute_after_one_failed_to_start(tmp_path: Path, runtime: Path) -> None:
    directory = tmp_path / "tree"
    _fill(directory)
    probe(runtime, "recall", str(directory), "uv", mode="auto")  # the first read: wanted
    failed = next(runtime.glob("kwtree-*/*.wanted")).with_suffix(".failed")
    failed.touch()  # as a server that failed to open the tree leaves it (its log says why)
    for _ in range(2):
        done, by_server = probe(runtime, "recall", str(directory), "uv", mode="auto")
        assert not by_server and "Uses uv" in done.stdout
    assert not list(runtime.glob("kwtree-*/*.log"))  # (made by a command that starts a server, before it exits)


def test_no_server_is_started_for_what_is_not_a_tree(tmp_path: Path, runtime: Path) -> None:
    done, _ = probe(runtime, "hook", "prompt", str(tmp_path / "nothing"), stdin=HOOK_PROMPT, mode="auto")
    assert done.returncode == 0 and done.stdout == ""
    assert not list(runtime.glob("kwtree-*/*.log"))  # (made by a command that starts a server, before it exits)


def test_a_rendezvous_directory_others_can_enter_is_not_used(tmp_path: Path, runtime: Path) -> None:
    directory = tmp_path / "tree"
    _fill(directory)
    (runtime / f"kwtree-{os.getuid()}").mkdir(mode=0o755)
    os.chmod(runtime / f"kwtree-{os.getuid()}", 0o755)
    done, by_server = probe(runtime, "recall", str(directory), "uv", mode="auto")
    assert not by_server and "Uses uv" in done.stdout
    served = subprocess.run([sys.executable, "-m", "kwtree", "serve", str(directory)], env=_env(runtime),
                            capture_output=True, text=True, timeout=60)
    assert served.returncode == 1 and "private place" in served.stderr


def test_the_served_commands_benchmark_runs(tmp_path: Path) -> None:
    bench_served = bench_module("served")
    result = bench_served.run(runs=1, memories=50, embedder="hash", work=tmp_path)
    assert {key: len(samples) for key, samples in result["raw_ms"].items()} == {
        "bare": 1, "help": 1, "recall_served": 1, "hook_served": 1, "stop_served": 1, "recall_alone": 1,
        "hook_alone": 1, "stop_alone": 1}
    assert "| kwtree recall, served |" in bench_served.markdown(result)
    assert list(tmp_path.iterdir()) == []  # its scratch tree is removed


def test_a_server_embeds_what_commands_wrote_so_vector_recall_finds_it(served: tuple[Path, Path, Server]) -> None:
    """Hooks and commands write and exit before their embedding is done (it is queued in the
    outbox); the server, which outlives them, embeds it."""
    directory, runtime, _ = served
    with KeywordTree(directory, durability="none", worker=False) as writer:  # queues, embeds nothing
        kayak = writer.create_info("Goes kayaking on the fjord every Sunday.")
    deadline = time.monotonic() + 60
    while True:
        done, by_server = probe(runtime, "recall", str(directory), "kayaking on the fjord", "--mode", "vector")
        assert by_server
        if kayak.id in done.stdout or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert kayak.id in done.stdout
    with KeywordTree(directory, read_only=True) as reader:
        assert reader.outbox_status()["pending"] == 0


def test_a_server_of_a_read_only_directory_reads_it_read_only(tmp_path: Path, runtime: Path) -> None:
    with tmpfs(tmp_path / "ro", "size=32m") as home:
        _fill(home / "tree")
        done = subprocess.run(["mount", "-o", "remount,ro", str(home)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        server = Server(home / "tree", runtime, "--idle", "60").ready()
        try:
            answered, by_server = probe(runtime, "recall", str(home / "tree"), "uv")
            assert by_server and "Uses uv" in answered.stdout
        finally:
            server.kill()


def test_a_forget_has_the_server_drop_the_erased_text_at_once(served: tuple[Path, Path, Server]) -> None:
    """A server holds the tree's texts in memory; after ``kwtree forget`` it reads the log at
    once (not at its next request, minutes later), so it holds the erased text no longer than
    the forget took."""
    directory, runtime, server = served
    found, by_server = probe(runtime, "recall", str(directory), "uv")
    assert by_server and "Uses uv" in found.stdout
    info_id = found.stdout.split("\t")[0]
    forgot = kwtree(runtime, "forget", str(directory), info_id)
    assert forgot.returncode == 0, forgot.stderr
    assert "stopped the server" in kwtree(runtime, "serve", str(directory), "--stop").stdout
    assert server.wait() == 0
    log = server.first + server.rest()
    assert "read 1 operation(s) another process asked it to read" in log


def test_a_hung_server_never_jams_a_hook(served: tuple[Path, Path, Server]) -> None:
    """A server that stops answering (here: stopped with SIGSTOP) is passed over after
    KWTREE_SERVE_TIMEOUT seconds: the hook answers by itself, as it would without a server."""
    directory, runtime, server = served
    args = ("hook", "prompt", str(directory), "--scope", "user:alice")
    alone = kwtree(runtime, *args, mode="off", stdin=HOOK_PROMPT)
    server.proc.send_signal(signal.SIGSTOP)
    try:
        done = subprocess.run([sys.executable, "-m", "kwtree", *args], input=HOOK_PROMPT, capture_output=True,
                              text=True, timeout=120, env={**_env(runtime), "KWTREE_SERVE_TIMEOUT": "1"})
    finally:
        server.proc.send_signal(signal.SIGCONT)
    assert (done.returncode, done.stdout, done.stderr) == (alone.returncode, alone.stdout, alone.stderr)


# --- what a review found ------------------------------------------------------------------------


def test_a_lock_another_process_holds_makes_the_server_decline_not_fail(served: tuple[Path, Path, Server]) -> None:
    """The server's tree keeps the shared full-text index current, under its lock; a command
    alone reads it read-only and never waits for that lock. While another process holds it,
    the served command is declined (within the server's short lock timeout) and runs alone."""
    directory, runtime, _ = served
    wrote = kwtree(runtime, "add-info", str(directory), "Canoeing on Mondays.", "--keyword", "Tools")
    assert wrote.returncode == 0, wrote.stderr
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from kwtree import KeywordTree
tree = KeywordTree({str(directory)!r}, worker=False)
with tree._caches.fulltext._lock.held():
    print("held", flush=True)
    sys.stdin.readline()
tree.close()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "held"
        alone = kwtree(runtime, "recall", str(directory), "canoeing", mode="off")
        answered, by_server = probe(runtime, "recall", str(directory), "canoeing")
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(60)
    assert alone.returncode == 0 and "Canoeing on Mondays." in alone.stdout
    assert not by_server and (answered.returncode, answered.stdout) == (0, alone.stdout)


def test_what_other_threads_print_during_an_answer_stays_out_of_it() -> None:
    """The server's other threads (its embedding worker logging a retry, a warning) print while
    a command is answered; only the answering thread's output goes into the reply (a review
    found 7 replies in 50 carrying a worker's log lines when stdout and stderr were redirected
    for the whole process)."""
    import io

    from kwtree.cli.server import _Routed

    real = io.StringIO()
    routed = _Routed(real)
    started, written = threading.Event(), threading.Event()

    def worker() -> None:
        started.wait(5)
        routed.write("embedding worker: HTTP 503; trying again\n")
        written.set()

    thread = threading.Thread(target=worker)
    thread.start()
    with routed.captured() as answer:
        routed.write("the answer\n")
        started.set()
        assert written.wait(5)
    thread.join()
    assert answer.getvalue() == "the answer\n"
    assert real.getvalue() == "embedding worker: HTTP 503; trying again\n"


@pytest.mark.parametrize("module", ["cli/output.py", "integrations/claude_code.py"])
def test_a_server_whose_kwtree_changed_declines_and_stops(served: tuple[Path, Path, Server], module: str) -> None:
    """An upgrade in place or an edited editable install: the server answers with the code it
    loaded, so it must not answer once that code changed; a module a command imports on first
    use (the hooks' integration, which a review found answered with its old code) counts as
    much as one every server loads (``kwtree.cli.output``)."""
    import kwtree

    directory, runtime, server = served
    path = Path(kwtree.__file__).parent / module
    before = path.stat()
    try:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        done, by_server = probe(runtime, "recall", str(directory), "uv")
        assert not by_server and "Uses uv" in done.stdout
        assert server.wait() == 0
    finally:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_what_opening_the_tree_logged_is_shown_by_every_command(tmp_path: Path, runtime: Path) -> None:
    """A log with a torn tail: each command opening it alone says so on stderr (a logged
    warning, not a ``warnings`` one). A server that opened it must leave every command to run
    by itself, as for a warning, not answer without the message (found in review)."""
    directory = tmp_path / "tree"
    _fill(directory)
    segment = sorted((directory / "log").glob("*.jsonl"))[-1]
    with segment.open("ab") as f:
        f.write(b'{"op":"torn-partial-write","payl')
    alone = kwtree(runtime, "recall", str(directory), "uv", mode="off")
    assert "incomplete operation" in alone.stderr
    server = Server(directory, runtime, "--idle", "120").ready()
    try:
        done, by_server = probe(runtime, "recall", str(directory), "uv")
        assert not by_server and done.stdout == alone.stdout and "incomplete operation" in done.stderr
    finally:
        server.kill()


def test_a_command_in_a_removed_working_directory_runs_by_itself(served: tuple[Path, Path, Server],
                                                                tmp_path: Path) -> None:
    directory, runtime, _ = served
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run([sys.executable, "-c", f"import os, sys\nos.chdir({str(gone)!r})\nos.rmdir({str(gone)!r})\n"
                           "from kwtree.cli.entry import main\nsys.exit(main(sys.argv[1:]))",
                           "recall", str(directory), "uv"], env=_env(runtime), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "Uses uv" in done.stdout, done.stderr
