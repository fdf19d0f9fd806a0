"""Distributed compilation (--distribute): hosts, settings, the identity-named compiler, distcc's log, the relays."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, hermetic, resolve_in_project
from hermetic.build import distribute, env, netrelay
from hermetic.core import platforms
from hermetic.core.errors import UsageError, VerifyError
from hermetic.model import record, toolchains
from hermetic.model import settings as settings_values
from hermetic.model.settings import CompileHost, Settings
from hermetic.model.settings import parse_distribute_setting as parse_setting
from hermetic.plan import pipeline as plan
from schemas.examples import fake_llvm_build


@pytest.mark.parametrize("text,host", [
    ("10.0.0.5", CompileHost("10.0.0.5", 3632, 4)),
    ("build-1.example:3700/8", CompileHost("build-1.example", 3700, 8)),
    ("127.0.0.2/2", CompileHost("127.0.0.2", 3632, 2)),
    ("[fd00::5]:3632/16", CompileHost("fd00::5", 3632, 16)),
])
def test_a_host_is_host_port_slots(text: str, host: CompileHost) -> None:
    assert settings_values.parse_host(text) == host


@pytest.mark.parametrize("text,why", [
    ("localhost", "compiling here"), ("h:0", "out of range"), ("h:70000", "out of range"), ("h/0", "slots"),
    ("h/999", "slots"), ("http://h", "HOST[:PORT][/SLOTS]"), ("h:/2", "HOST[:PORT][/SLOTS]"), ("-h", "HOST[:PORT]"),
])
def test_a_bad_host_is_a_usage_error(text: str, why: str) -> None:
    with pytest.raises(UsageError) as err:
        settings_values.parse_host(text)
    assert why in err.value.why and err.value.fix


def test_hosts_are_separated_by_commas_or_spaces_and_named_once() -> None:
    dist = parse_setting("127.0.0.2:36/2, 127.0.0.3/3 10.0.0.1")
    assert dist is not None and [h.spec for h in dist.hosts] == ["127.0.0.2:36/2", "127.0.0.3:3632/3", "10.0.0.1:3632/4"]
    assert dist.slots == 9 and parse_setting(["127.0.0.2:36/2", "127.0.0.3/3,10.0.0.1"]) == dist
    assert parse_setting("") is None and parse_setting(" , ") is None and parse_setting(None) is None
    with pytest.raises(UsageError, match="named twice"):
        parse_setting("10.0.0.1, 10.0.0.1:3632/2")
    with pytest.raises(UsageError, match="invalid compile hosts"):
        parse_setting(3)


def test_the_setting_from_each_layer_in_order_of_precedence(tmp_path: Path) -> None:
    table = 'distribute = ["10.0.0.1", "10.0.0.2/8"]'
    assert resolve_in_project(tmp_path / "t", table=table).distribute == parse_setting("10.0.0.1 10.0.0.2/8")
    env = {"HERMETIC_DISTRIBUTE": "10.0.0.3"}
    assert resolve_in_project(tmp_path / "e", env=env, table=table).distribute == parse_setting("10.0.0.3")
    cli = {"distribute": "10.0.0.4:1/1"}
    assert resolve_in_project(tmp_path / "c", cli=cli, env=env, table=table).distribute == parse_setting("10.0.0.4:1/1")
    assert resolve_in_project(tmp_path / "n", cli={"no_distribute": True}, env=env, table=table).distribute is None
    assert resolve_in_project(tmp_path / "z", env={"HERMETIC_DISTRIBUTE": ""}).distribute is None
    assert resolve_in_project(tmp_path / "d").distribute is None


def test_refusals_come_before_anything_runs_without_traceback(tmp_path: Path) -> None:
    work = tmp_path / "w"
    proc = hermetic("build", "llvm", "--variant", "support", "--toolchain", "host", "--work-dir", str(work),
                    "--distribute", "127.0.0.2", check=False)
    assert proc.returncode == 2 and "needs a pinned toolchain" in proc.stderr and "Traceback" not in proc.stderr
    assert not work.exists()
    proc = hermetic("all", "--distribute", "localhost", check=False)
    assert proc.returncode == 2 and "invalid compile host" in proc.stderr and "Traceback" not in proc.stderr
    proc = hermetic("build", "llvm", "--distribute", "h", "--no-distribute", check=False)
    assert proc.returncode == 2 and "not allowed with" in proc.stderr
    proc = hermetic("fetch", "--distribute", "h", check=False)
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr


def _settings(tmp_path: Path, **kw: Any) -> Settings:
    return Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True, variant="support",
                    toolchain="zig", **kw)


def test_distribution_is_no_input_of_any_step(tmp_path: Path) -> None:
    plain = plan.plan_all(_settings(tmp_path), lambda m: None)
    spread = plan.plan_all(_settings(tmp_path, distribute=parse_setting("127.0.0.2:9/2")), lambda m: None)
    assert [(s.key, s.inputs_digest) for s in spread.steps] == [(s.key, s.inputs_digest) for s in plain.steps]
    assert "compiles spread over 127.0.0.2:9/2 (distcc)" in spread.step("build").detail
    assert "distcc" not in plain.step("build").detail


def test_a_cross_build_is_taken_and_the_host_toolchain_refused() -> None:
    """A cross build sends only the target's compiles (the launcher passes tablegen's native ones through)."""
    tc = toolchains.for_root(ROOT)
    dist = parse_setting("10.0.0.1")
    assert dist is not None
    cross = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", None, platforms.zig_arch("arm64"))
    distribute.check_usable(dist, tc)
    distribute.check_usable(dist, cross)
    assert distribute.compiler_name(cross, "c++") != distribute.compiler_name(tc, "c++")  # a host needs --arch arm64
    host = toolchains.select(toolchains.load(ROOT / "toolchain"), "host", None)
    with pytest.raises(UsageError, match="needs a pinned toolchain"):
        distribute.check_usable(dist, host)


# --- the compiler the hosts run ------------------------------------------------------------------


def test_the_compiler_is_named_by_the_toolchain_not_its_paths() -> None:
    tc = toolchains.for_root(ROOT)
    name = distribute.compiler_name(tc, "c++")
    assert name.startswith(f"hermetic-{tc.name}-") and name.endswith("-c++") and name != distribute.compiler_name(tc, "cc")
    other = toolchains.Toolchain(**{**tc.__dict__, "sha256": "0" * 64})
    assert distribute.compiler_name(other, "c++") != name
    # the same name wherever the toolchain is unpacked: what the script says beyond the paths is in the name
    here = distribute.wrapper_script(tc, Path("/a/zig"), Path("/a/cache"), "c++")
    there = distribute.wrapper_script(tc, Path("/b/zig"), Path("/b/cache"), "c++")
    assert here.replace("/a/", "/b/") == there


@pytest.fixture
def fake_zig(tmp_path: Path) -> Path:
    """A `zig` that writes its arguments and the file it compiles (as `-x LANG FILE`) to args.json."""
    root = tmp_path / "zig"
    root.mkdir()
    (root / "zig").write_text(
        "#!/usr/bin/env python3\nimport json, sys, pathlib\nargs = sys.argv[1:]\n"
        "text = pathlib.Path(args[args.index('-x') + 2]).read_text() if '-x' in args else ''\n"
        f"pathlib.Path({str(tmp_path / 'args.json')!r}).write_text(json.dumps({{'args': args, 'text': text}}))\n"
    )
    (root / "zig").chmod(0o755)
    return root


def _run_wrapper(tmp_path: Path, fake_zig: Path, lang: str, *args: str) -> dict[str, Any]:
    tc = toolchains.for_root(ROOT)
    wrappers = distribute.write_wrappers(tc, fake_zig, tmp_path / "cache", tmp_path / "bin")
    subprocess.run([str(wrappers[lang]), *args], check=True, cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    result: dict[str, Any] = json.loads((tmp_path / "args.json").read_text())
    return result


def test_a_preprocessed_file_is_compiled_under_its_original_name(tmp_path: Path, fake_zig: Path) -> None:
    ii = tmp_path / "distccd_a1b2.ii"
    ii.write_text('# 1 "/src/llvm/lib/Support/APInt.cpp"\n# 1 "<built-in>" 1\nint x;\n')
    got = _run_wrapper(tmp_path, fake_zig, "c++", "-O3", "-c", str(ii), "-o", "out.o", distribute.DEPFILE_FLAG)
    args = got["args"]
    i = args.index("-x")
    assert args[i + 1] == "c++" and args[i + 2].endswith("/APInt.cpp") and str(ii) not in args
    assert got["text"] == ii.read_text()
    assert args[-5:-3] == ["-MD", "-MF"] and args[-2:] == ["-Wno-gnu-line-marker", "-g0"]  # as the build's compile
    assert distribute.DEPFILE_FLAG not in args and args[:3] == ["c++", "-target", toolchains.for_root(ROOT).target]
    assert not Path(args[i + 2]).exists()  # the copy is removed


def test_a_plain_compile_passes_through_and_c_gets_c(tmp_path: Path, fake_zig: Path) -> None:
    got = _run_wrapper(tmp_path, fake_zig, "c++", "-O2", "-MD", "-MF", "x.d", "-c", "a.cpp", "-o", "a.o", "-stdlib=libc++")
    assert "-x" not in got["args"] and got["args"].count("-MD") == 1 and "-stdlib=libc++" not in got["args"]
    i_file = tmp_path / "distccd_q.i"
    i_file.write_text('# 1 "/src/regcomp.c"\nint y;\n')
    got = _run_wrapper(tmp_path, fake_zig, "cc", "-c", str(i_file), "-o", "b.o")
    i = got["args"].index("-x")
    assert got["args"][i + 1] == "c" and got["args"][i + 2].endswith("/regcomp.c") and "-MD" not in got["args"]


def test_the_launcher_sends_the_build_compiler_by_name_only(tmp_path: Path) -> None:
    log = tmp_path / "distcc.args"
    fake = tmp_path / "distcc"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    fake.chmod(0o755)
    launcher = tmp_path / "launch"
    launcher.write_text(distribute.launcher_script(
        str(fake), {Path("/w/bin/cc"): "hermetic-zig-x-cc", Path("/w/bin/c++"): "hermetic-zig-x-c++"}))
    launcher.chmod(0o755)
    subprocess.run([str(launcher), "/w/bin/c++", "-MD", "-MF", "a.d", "-c", "a.cpp"], check=True)
    assert log.read_text().split() == ["hermetic-zig-x-c++", distribute.DEPFILE_FLAG, "-MD", "-MF", "a.d", "-c", "a.cpp"]
    subprocess.run([str(launcher), "/w/bin/cc", "-c", "a.c"], check=True)  # one launcher for both languages
    assert log.read_text().split() == ["hermetic-zig-x-cc", "-c", "a.c"]
    out = subprocess.run([str(launcher), "echo", "another", "compiler"], check=True, capture_output=True, text=True)
    assert out.stdout == "another compiler\n"  # not the build's compiler: run here, as it is
    check = [str(launcher), "/w/bin/c++", "-c", "/b/CMakeFiles/CMakeScratch/TryCompile-x/src.cxx"]
    log.unlink()
    with pytest.raises(subprocess.CalledProcessError):  # a configure check runs the compiler here (/w/bin/c++: none)
        subprocess.run(check, check=True, capture_output=True)
    assert not log.exists()
    # behind ccache the check's paths are relative (base_dir): its directory is the current one
    scratch = tmp_path / "b" / "CMakeFiles" / "CMakeScratch" / "TryCompile-x"
    scratch.mkdir(parents=True)
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run([str(launcher), "/w/bin/c++", "-c", "src.cxx"], cwd=scratch, check=True, capture_output=True)
    assert not log.exists()


# --- distcc's log and the record ------------------------------------------------------------------

CLIENT_LOG = """\
distcc[1] compile from APInt.cpp to APInt.o
distcc[1] exec on 127.0.0.1:3632/2,lzo: hermetic-zig-x-c++ -O3 -c APInt.cpp -o APInt.o
distcc[1] cpp APInt.cpp on localhost completed ok
distcc[1] compile APInt.cpp on 127.0.0.1:3632/2,lzo completed ok
distcc[2] compile Path.cpp on 127.0.0.1:3633/2,lzo completed ok
distcc[3] compile X.cpp on 127.0.0.1:3632/2,lzo completed ok
distcc[4] exec on 127.0.0.1:3633/2,lzo: hermetic-zig-x-c++ -O3 -c Y.cpp -o Y.o
distcc[4] ERROR: compile Y.cpp on 127.0.0.1:3633/2,lzo failed with exit code 126
distcc[4] (dcc_build_somewhere) Warning: remote compilation of 'Y.cpp' failed, retrying locally
distcc[4] Warning: failed to distribute Y.cpp to 127.0.0.1:3633/2,lzo, running locally instead
distcc[4] compile Y.cpp on localhost completed ok
distcc[5] (dcc_build_somewhere) Warning: failed to distribute, running locally instead
distcc[5] exec on localhost: hermetic-zig-x-c++ -O3 -MD -MF Z.d -c Z.cpp -o Z.o
distcc[5] compile Z.cpp on localhost completed ok
distcc[6] exec on 127.0.0.1:3634/1,lzo: hermetic-zig-x-c++ -O3 -c W.cpp -o W.o
distcc[6] (dcc_writex) ERROR: failed to write: Broken pipe
distcc[6] (dcc_r_result_header) ERROR: server provided no answer. Is the server configured to allow access from your IP address?
distcc[6] exec on 127.0.0.1:3633/2,lzo: hermetic-zig-x-c++ -O3 -c W.cpp -o W.o
distcc[6] compile W.cpp on 127.0.0.1:3633/2,lzo completed ok
"""


def test_the_client_log_says_where_each_compile_ran() -> None:
    counts = distribute.parse_client_log(CLIENT_LOG)
    assert counts.remote == {"127.0.0.1:3632": 2, "127.0.0.1:3633": 2} and counts.local == 2
    assert (counts.fallbacks, counts.retried) == (1, 1)  # Y failed on its host; Z never got one
    assert counts.rerouted == 1 and counts.failed == {"127.0.0.1:3633": 1, "127.0.0.1:3634": 1}  # W's host went away


def _use(tmp_path: Path, relayed: bool = True) -> record.DistributedCompiles:
    dist = parse_setting("127.0.0.2:36/2,127.0.0.3:37/2,127.0.0.4:38/1")
    assert dist is not None
    return env.summarize(
        dist, relayed, [(True, "ok"), (False, "refused"), (True, "ok")], distribute.parse_client_log(CLIENT_LOG), {1: 3},
        "compile hosts …", distribute.Distcc("/usr/bin/distcc", "3.4"), ("hermetic-zig-x-cc", "hermetic-zig-x-c++"), 6,
    )


def test_the_record_names_each_host_with_what_it_compiled(tmp_path: Path) -> None:
    use = _use(tmp_path)
    assert [(h.address, h.compiles, h.refused, h.failed, h.answered) for h in use.hosts] == [
        ("127.0.0.2:36", 2, 0, 0, True), ("127.0.0.3:37", 2, 3, 1, False), ("127.0.0.4:38", 0, 0, 1, True)]
    assert (use.remote, use.local, use.fallbacks, use.retried, use.rerouted) == (4, 2, 1, 1, 1)
    assert "1 compiles fell back" in use.note and "1 compiles failed on a host" in use.note
    assert "1 compiles whose host failed them" in use.note
    direct = _use(tmp_path, relayed=False)  # without the relay, distcc's log names the hosts themselves
    assert direct.remote == 0 and direct.note.endswith("no compile went to a host")


def test_the_record_entry_round_trips_and_older_records_load(tmp_path: Path) -> None:
    path = fake_llvm_build(tmp_path)
    plain = record.load_build_record(path)
    assert plain.distributed is None and "distributed" not in json.loads(path.read_text())
    rec = record.BuildRecord.from_json(plain.as_json() | {"distributed": _use(tmp_path).as_json()})
    assert rec.distributed == _use(tmp_path) and record.BuildRecord.from_json(rec.as_json()) == rec
    assert (rec.tree, rec.inputs_digest) == (plain.tree, plain.inputs_digest)
    data = rec.as_json()
    data["distributed"]["hosts"][0]["compiles"] = "2"
    with pytest.raises(VerifyError) as err:
        record.BuildRecord.from_json(data, "r.json")
    assert "distributed.hosts" in err.value.why or "compiles" in err.value.why


# --- the relays -----------------------------------------------------------------------------------


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                data = b""
                while chunk := c.recv(4096):
                    data += chunk
                c.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_the_outside_relay_reaches_its_host_only_and_counts(tmp_path: Path) -> None:
    srv, port = _echo_server()
    down = socket.socket()
    down.bind(("127.0.0.1", 0))
    down_port = down.getsockname()[1]
    down.close()  # nothing listens there
    up_sock, down_sock = str(tmp_path / "0.sock"), str(tmp_path / "1.sock")
    with netrelay.Outside([(up_sock, "127.0.0.1", port), (down_sock, "127.0.0.1", down_port)]) as relay:
        for _ in range(2):
            with socket.socket(socket.AF_UNIX) as c:
                c.connect(up_sock)
                c.sendall(b"hello")
                c.shutdown(socket.SHUT_WR)
                assert c.recv(100) == b"HELLO"
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(down_sock)
            assert c.recv(100) == b""  # closed at once: distcc then compiles locally
    srv.close()
    up, gone = relay.counts[up_sock], relay.counts[down_sock]
    assert (up.connections, up.refused, up.sent, up.received) == (2, 0, 10, 10)
    assert (gone.connections, gone.refused) == (0, 1)


def test_the_inside_relay_runs_its_command_and_passes_the_status_on(tmp_path: Path) -> None:
    proc = subprocess.run([*netrelay.argv(sys.executable, []), "sh", "-c", "exit 3"], capture_output=True, text=True)
    # bringing loopback up needs CAP_NET_ADMIN (root, or the build's namespace); a plain user gets a clear message
    assert proc.returncode == 3 or "cannot relay the compile hosts" in proc.stderr
    assert subprocess.run([*netrelay.argv(sys.executable, [])[:-1]], capture_output=True).returncode == 2
