"""resolve_refusing_planted_links: links are followed as the kernel's fs.protected_symlinks follows them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuscope.platform.links import PlantedLinkError, refuse_planted_side_links, resolve_refusing_planted_links
from tests.other_user import NOBODY, needs_root_to_plant, plant_link, shared_folder


@pytest.fixture
def private_target(tmp_path: Path) -> Path:
    target = tmp_path / "private" / "passwd"
    target.parent.mkdir()
    target.write_text("root's")
    return target


@needs_root_to_plant
def test_a_link_another_user_planted_in_a_sticky_folder_is_refused(tmp_path: Path, private_target: Path) -> None:
    link = plant_link(shared_folder(tmp_path) / "trace.json", private_target)
    with pytest.raises(
        PlantedLinkError,
        match=rf"trace\.json: not following a symlink owned by another user \(uid {NOBODY}\) in the sticky folder",
    ):
        resolve_refusing_planted_links(link)


@needs_root_to_plant
def test_a_dangling_link_another_user_planted_is_refused_too(tmp_path: Path) -> None:
    link = plant_link(shared_folder(tmp_path) / "trace.db", tmp_path / "nowhere" / "made.db")
    with pytest.raises(PlantedLinkError):
        resolve_refusing_planted_links(link)


@needs_root_to_plant
def test_a_planted_link_on_the_way_to_the_file_is_refused(tmp_path: Path, private_target: Path) -> None:
    plant_link(shared_folder(tmp_path) / "out", private_target.parent)
    with pytest.raises(PlantedLinkError, match=r"shared/out: not following"):
        resolve_refusing_planted_links(tmp_path / "shared" / "out" / "passwd")


@needs_root_to_plant
def test_a_planted_link_in_a_world_writable_folder_without_the_sticky_bit_is_refused(
    tmp_path: Path, private_target: Path
) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(PlantedLinkError, match="world-writable folder"):
        resolve_refusing_planted_links(plant_link(folder / "x.json", private_target))


@needs_root_to_plant
def test_a_link_another_user_planted_where_the_database_side_files_go_is_refused(
    tmp_path: Path, private_target: Path
) -> None:
    folder = shared_folder(tmp_path)
    plant_link(folder / "trace.db-wal", private_target)
    with pytest.raises(PlantedLinkError, match=r"trace\.db-wal"):
        refuse_planted_side_links(folder / "trace.db")


def test_ones_own_link_in_a_sticky_folder_is_followed(tmp_path: Path, private_target: Path) -> None:
    link = shared_folder(tmp_path) / "trace.json"
    link.symlink_to(private_target)
    assert resolve_refusing_planted_links(link) == private_target


@needs_root_to_plant
def test_a_link_the_folders_owner_made_is_followed_by_others(tmp_path: Path, private_target: Path) -> None:
    # given a sticky folder that belongs to nobody, with nobody's link in it
    folder = shared_folder(tmp_path)
    os.chown(folder, NOBODY, NOBODY)
    link = plant_link(folder / "trace.json", private_target)
    # then the folder's owner vouches for it, as the kernel's rule says
    assert resolve_refusing_planted_links(link) == private_target


@needs_root_to_plant
def test_another_users_link_in_a_private_folder_is_followed(tmp_path: Path, private_target: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o755)
    link = plant_link(folder / "trace.json", private_target)
    assert resolve_refusing_planted_links(link) == private_target


@pytest.mark.parametrize(
    "name",
    ["a/b/file", "link/file", "link/../file", "rel/./file", "dangling", "missing/deeper/file", "chain", "loop/file"],
)
def test_paths_resolve_as_realpath_resolves_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # given folders, links (absolute, relative, chained, dangling, a loop) and a relative path
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b")
    (tmp_path / "rel").symlink_to("a")
    (tmp_path / "dangling").symlink_to("a/b/not-yet")
    (tmp_path / "chain").symlink_to("rel/b")
    (tmp_path / "loop").symlink_to("loop")
    monkeypatch.chdir(tmp_path)
    # then the result is realpath's, relative or absolute
    assert resolve_refusing_planted_links(name) == Path(os.path.realpath(name))
    assert resolve_refusing_planted_links(tmp_path / name) == Path(os.path.realpath(tmp_path / name))
