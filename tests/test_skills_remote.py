"""`agentd skills add URL`: archives and single SKILL.md files from a local web server, fetched
through the SSRF-safe fetcher, unpacked without traversal, links or bombs."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.skills.folder import Limits
from agentd.skills.remote import RemoteSkillError, unpack
from tests.fakes.site import FakeSite

DATA = Path(__file__).parent / "data" / "skills"


def zip_of(folder: Path, prefix: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                info = zipfile.ZipInfo(f"{prefix}/{path.relative_to(folder).as_posix()}")
                info.external_attr = (stat.S_IFREG | (path.stat().st_mode & 0o777)) << 16
                archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def tar_of(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, target, 0o644
    return info


SKILL_MD = (DATA / "unit-convert" / "SKILL.md").read_bytes()


@pytest.fixture
def site() -> Iterator[FakeSite]:
    with FakeSite.running() as server:
        yield server


def agentd(tmp: Path, *args: str, allow_local: bool = True) -> subprocess.CompletedProcess[str]:
    config = '[storage]\npath = "agentd.db"\n'
    if allow_local:
        config += '[tools.fetch]\nallowed_hosts = ["127.0.0.1"]\n'
    (tmp / "agentd.toml").write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env["AGENTD_CONFIG"] = str(tmp / "agentd.toml")
    daemon_ran(tmp / "agentd.db")
    return subprocess.run(
        [sys.executable, "-m", "agentd", "skills", *args],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def daemon_ran(path: Path) -> None:
    """The database as `agentd run` leaves it (skills are enabled in it)."""
    conn = open_sync(path)
    try:
        apply_migrations(conn)
    finally:
        conn.close()


def test_a_zip_like_a_repository_archive_installs(tmp_path: Path, site: FakeSite) -> None:
    url = site.raw(
        "/word-stats.zip", zip_of(DATA / "word-stats", "skills-main/word-stats"), "application/zip"
    )
    added = agentd(tmp_path, "add", url, "--yes")
    assert added.returncode == 0, added.stderr
    assert f"from {url}" in added.stderr and "scripts/stats.py" in added.stderr
    installed = tmp_path / "skills" / "word-stats"
    assert (installed / "SKILL.md").read_bytes() == (DATA / "word-stats" / "SKILL.md").read_bytes()
    assert os.access(installed / "scripts" / "stats.py", os.X_OK)
    listed = agentd(tmp_path, "ls", "--json")
    assert '"state": "enabled"' in listed.stdout


def test_a_single_skill_md_and_a_tarball_install(tmp_path: Path, site: FakeSite) -> None:
    url = site.raw("/SKILL.md", SKILL_MD, "text/markdown")
    assert agentd(tmp_path, "add", url, "--yes").returncode == 0
    assert (tmp_path / "skills" / "unit-convert" / "SKILL.md").read_bytes() == SKILL_MD
    other = SKILL_MD.replace(b"name: unit-convert", b"name: other-skill")
    tarball = tar_of(
        [(member("x/other-skill/SKILL.md"), other), (member("x/other-skill/notes.txt"), b"hello")]
    )
    url = site.raw("/other.tar.gz", tarball, "application/gzip")
    added = agentd(tmp_path, "add", url, "--yes")
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "skills" / "other-skill" / "notes.txt").read_text() == "hello"


def test_private_addresses_are_refused_unless_allowed(tmp_path: Path, site: FakeSite) -> None:
    url = site.raw("/SKILL.md", SKILL_MD, "text/markdown")
    refused = agentd(tmp_path, "add", url, "--yes", allow_local=False)
    assert refused.returncode == 1 and "refused" in refused.stderr
    assert not (tmp_path / "skills").exists() and site.requests == []


def test_several_skills_need_a_choice(tmp_path: Path, site: FakeSite) -> None:
    one, two = (SKILL_MD.replace(b"unit-convert", name) for name in (b"one", b"two"))
    two = tar_of([(member("a/one/SKILL.md"), one), (member("a/two/SKILL.md"), two)])
    url = site.raw("/two.tgz", two, "application/gzip")
    many = agentd(tmp_path, "add", url, "--yes")
    assert many.returncode == 1 and "several skills (one, two)" in many.stderr
    chosen = agentd(tmp_path, "add", url, "--skill", "two", "--yes")
    assert chosen.returncode == 0, chosen.stderr
    assert sorted(p.name for p in (tmp_path / "skills").iterdir()) == ["two"]


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ([(member("../evil/SKILL.md"), SKILL_MD)], "leaves it"),
        ([(member("/etc/cron.d/x"), b"x")], "unsafe path"),
        (
            [
                (member("s/SKILL.md"), SKILL_MD),
                (member("s/link", tarfile.SYMTYPE, "/etc/passwd"), None),
            ],
            "link",
        ),
        (
            [
                (member("s/SKILL.md"), SKILL_MD),
                (member("s/hard", tarfile.LNKTYPE, "s/SKILL.md"), None),
            ],
            "link",
        ),
        (
            [(member("s/SKILL.md"), SKILL_MD), (member("s/fifo", tarfile.FIFOTYPE), None)],
            "special file",
        ),
        ([(member("s/SKILL.md"), SKILL_MD), (member("s/SKILL.md"), SKILL_MD)], "twice"),
        ([(member(f"s/f{n}"), b"x") for n in range(12)], "more than 10 files"),
        ([(member("s/big"), b"\0" * 5000)], "more than 4,096 bytes"),
    ],
    ids=["dotdot", "absolute", "symlink", "hardlink", "fifo", "twice", "count", "bomb"],
)
def test_unsafe_tarballs_are_refused_and_write_nothing_outside(
    tmp_path: Path, entries: list[tuple[tarfile.TarInfo, bytes | None]], problem: str
) -> None:
    into = tmp_path / "in"
    into.mkdir()
    with pytest.raises(RemoteSkillError, match=problem):
        unpack(tar_of(entries), into, Limits(max_files=10, max_bytes=4096))
    outside = {p for p in tmp_path.rglob("*") if into not in p.parents and p != into}
    assert outside == set()


def test_unsafe_zips_are_refused(tmp_path: Path) -> None:
    def zipped(name: str, data: bytes, mode: int = stat.S_IFREG | 0o644) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            archive.writestr(info, data)
        return buffer.getvalue()

    cases = [
        (zipped("../x/SKILL.md", SKILL_MD), "leaves it"),
        (zipped("s\\..\\..\\x", b"x"), "unsafe path"),
        (zipped("s/link", b"/etc/passwd", stat.S_IFLNK | 0o777), "symbolic link"),
        # 50 MB of zeros compress to ~50 KB: the bytes written are counted, not the header.
        (zipped("s/bomb", b"\0" * 50_000_000), "more than 1,000,000 bytes"),
    ]
    for n, (body, problem) in enumerate(cases):
        into = tmp_path / str(n)
        into.mkdir()
        with pytest.raises(RemoteSkillError, match=problem):
            unpack(body, into, Limits(max_files=10, max_bytes=1_000_000))
    assert {p.name for p in tmp_path.iterdir()} == {"0", "1", "2", "3"}


def test_downloads_over_the_limit_and_non_skills_are_refused(
    tmp_path: Path, site: FakeSite
) -> None:
    url = site.raw("/huge.zip", b"PK\x03\x04" + b"\0" * 30_000, "application/zip")
    (tmp_path / "agentd.toml").write_text("")
    env_config = (
        '[tools.fetch]\nallowed_hosts = ["127.0.0.1"]\n[skills]\nmax_download_bytes = 20000\n'
    )
    (tmp_path / "agentd.toml").write_text(env_config)
    daemon_ran(tmp_path / "agentd.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env["AGENTD_CONFIG"] = str(tmp_path / "agentd.toml")
    big = subprocess.run(
        [sys.executable, "-m", "agentd", "skills", "add", url, "--yes"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert big.returncode == 1 and "max_download_bytes" in big.stderr
    url = site.raw("/page.html", b"<html>not a skill</html>", "text/html")
    page = agentd(tmp_path, "add", url, "--yes")
    assert page.returncode == 1 and "not a usable SKILL.md" in page.stderr
    url = site.raw("/gone", b"", "text/plain", status=404)
    gone = agentd(tmp_path, "add", url, "--yes")
    assert gone.returncode == 1 and "HTTP 404" in gone.stderr


def _header(name: bytes, kind: bytes, size: int) -> bytes:
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = b"%011o\0" % size
    block[156:157] = kind
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


@pytest.mark.parametrize("kind", [b"x", b"g", b"L"])
def test_a_huge_metadata_header_is_refused_before_it_is_read(tmp_path: Path, kind: bytes) -> None:
    import gzip

    # 8 MB of header declared, 64 KB of it present: tarfile would read it all into memory
    # (a 972 KB download declaring 1 GB did exactly that) before any check of ours.
    body = gzip.compress(_header(b"././@PaxHeader", kind, 8 << 20) + bytes(65536))
    into = tmp_path / "in"
    into.mkdir()
    with pytest.raises(RemoteSkillError, match="metadata header"):
        unpack(body, into, Limits(max_files=10, max_bytes=1_000_000))


def test_an_archive_unpacking_past_the_limits_is_refused(tmp_path: Path) -> None:
    import gzip

    body = gzip.compress(_header(b"big.bin", b"0", 50 << 20) + bytes(50 << 20))
    into = tmp_path / "in"
    into.mkdir()
    with pytest.raises(RemoteSkillError, match="unpacks to more than"):
        unpack(body, into, Limits(max_files=10, max_bytes=1_000_000))


def test_a_zip_with_permission_bits_only_installs_and_a_corrupt_one_is_refused(
    tmp_path: Path,
) -> None:
    """A member whose mode holds permissions but no file type (as Python's `writestr(name)`
    and some zippers write it) is a plain file, not a "special file"; a member whose
    compressed bytes are corrupt is refused with the reason, never a zlib traceback."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("demo/SKILL.md", SKILL_MD)  # external_attr = 0o600 << 16
        archive.writestr("demo/notes.md", SKILL_MD * 50)
    body = buffer.getvalue()
    (tmp_path / "ok").mkdir()
    found = unpack(body, tmp_path / "ok", Limits(max_files=10, max_bytes=100_000))
    assert (found / "notes.md").read_bytes() == SKILL_MD * 50
    corrupt = bytearray(body)
    start = corrupt.index(b"demo/notes.md") + len(b"demo/notes.md")
    corrupt[start + 5 : start + 40] = bytes(b ^ 0xFF for b in corrupt[start + 5 : start + 40])
    (tmp_path / "bad").mkdir()
    with pytest.raises(RemoteSkillError, match="cannot be read"):
        unpack(bytes(corrupt), tmp_path / "bad", Limits(max_files=10, max_bytes=1_000_000))
