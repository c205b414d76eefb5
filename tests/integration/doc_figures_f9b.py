"""Finding 9 of docs/BENCHMARKS.md from the caption writer's rates through the 4-GPU conversions, and its Method
section, each against the raw result under bench/results it names (doc_figures_f9.py checks the finding's start)."""

from __future__ import annotations

import json
import lzma
import statistics

from doc_figures import (
    BENCHMARKS,
    ENCODE_STAGE,
    F9_BS256,
    F9_CONVERT,
    F9_GRAPHS,
    F9_RATE,
    F9_RATE2,
    RESULTS,
    Figure,
    _convert_row,
    _rate_row,
    _stage,
)

EARLIER = tuple(f"f9_text_h100/{d}/encoder_rates.json" for d in ("rate_1_serial", "rate_2_copy_overlapped", "rate"))
HOST_GROUP = "f9_text_4xh200/t5_host_group/t5_gpus4.manifest.json"
RAW_SEND_4 = (F9_CONVERT["raw_send"][2], F9_BS256[2])  # 76159db's 4-GPU manifests, batch 64 and 256
# every T5-XL convert on 1 and 4 GPUs whose --timings time the import and the load apart (95f8ffd's did not)
T5_ROWS = tuple(m for k in ("t5_stages", "listed", "host_group", "raw_send") for m in F9_CONVERT[k][0::2])
T5_ROWS += F9_BS256[0::2]
WRITER = "{:,.0f} | {:,.0f} ({:.0%}) | {:,.0f} ({:.0%}) | {:,.0f} ({:.0%}) |"  # a writer-rate row after its name
PLAIN = WRITER + " {:.1f} GB/s disk, {:.1f} GB/s memory |"  # and the plain write of the same bytes
F2 = "f2_tiny_bs512_cpus4/raw.tar.xz:results.csv"
XCHECK = "xcheck/raw.tar.xz:{}-r0-xcheck.json"
XROW = "| {:.1%} | {:.1%} | +{:.2f} pp | {:.1%} |"  # a cross-check row after its name


def _speedscope(beside: str, name: str) -> dict:
    """A py-spy profile kept xz-compressed beside a result (load() reads no plain .xz)."""
    return json.loads(lzma.decompress((RESULTS / beside).with_name(name).read_bytes()))


def _frames(profile: dict, thread: str = "") -> list[set[str]]:
    """Each sample of the threads whose name holds `thread`, as the set of function names on its stack."""
    names = [f["name"] for f in profile["shared"]["frames"]]
    return [{names[i] for i in s} for p in profile["profiles"] if thread in p["name"] for s in p["samples"]]


def _tokenizer_share(_rates: dict) -> tuple:
    """The share of the graphed encoder's `encode` samples inside the tokenizer's call, in the one-round profile."""
    profile = _speedscope(F9_GRAPHS[1], "profile_1round.speedscope.json.xz")
    encode = [s for s in _frames(profile) if "TransformersEncoder.encode" in s]
    return (sum("PreTrainedTokenizerBase.__call__" in s for s in encode) / len(encode),)


def _gather(manifest: dict) -> tuple:
    """Rank 0's encoding thread: seconds in gather_object and in all (py-spy's 10 ms samples), and the embeddings
    the other 3 of 4 ranks sent it (GB), 2 bytes a value of the encoder's width a token."""
    profile = _speedscope(HOST_GROUP, "t5_gpus4.speedscope.json.xz")
    per_s = 1 / next(p for p in profile["profiles"] if "text-encode_0" in p["name"])["weights"][0]
    encoding = [s for s in _frames(profile, "text-encode_0") if "TextCacheWriter.encode_ahead.<locals>.encode" in s]
    token = manifest["text"]["encoder"]["dim"] * 2
    sent = manifest["text"]["tokens"] * token * 3 / 4 / 1e9
    return token / 1024, sum("gather_object" in s for s in encoding) / per_s, len(encoding) / per_s, sent


def _of_alone(row: dict, where: str) -> list[float]:
    return [r[f"writer_per_s {where}"] / r["encoder_alone_per_s"] for r in row["rounds"]]


def _lost(row: dict) -> float:
    """Seconds the writer with files on disk took over the encoder alone, for the same captions."""
    m = row["median"]
    return row["captions"] / m["writer_per_s /tmp"] - row["captions"] / m["encoder_alone_per_s"]


def _cell(row: dict) -> tuple:
    return row["kind"], row["backend"], row["workers"], row["pin_memory"]


def _half_range(rows: list[dict], cell: tuple) -> float:
    rates = [float(r["samples_per_s"]) for r in rows if _cell(r) == cell]
    return (max(rates) - min(rates)) / 2 / statistics.median(rates)


def _xcheck(run: dict) -> tuple:
    c = run["figures"]["crosscheck"]
    return c["events_starvation"], c["starvation"], c["difference_pp"], run["figures"]["nvml_idle"]


XRUNS = (  # the cross-check table: (row as written, run)
    ("`ddpm_cifar10` b128 compiled, `gpu`", "gpu-wna-pinna-bs128-ddpm_cifar10-cpusall-bf16-compiled"),
    ("`ddpm_cifar10` b128 compiled, torch 0 workers", "torch-w0-pinon-bs128-ddpm_cifar10-cpusall-bf16-compiled"),
    ("`tiny` b512 `--cpus 4`, `gpu`", "gpu-wna-pinna-bs512-tiny-cpus4-bf16"),
    ("`tiny` b512 `--cpus 4`, hdf5 3 workers", "hdf5-w3-pinon-bs512-tiny-cpus4-bf16"),
    ("`tiny` b512 `--cpus 4`, torch 3 workers", "torch-w3-pinon-bs512-tiny-cpus4-bf16"),
)

FIGURES = (
    *(
        Figure(
            (BENCHMARKS,),
            f"| {name} | " + PLAIN.format(*row, *disk),
            F9_RATE,
            lambda r, k=k: (
                *_rate_row(r["rows"][k]),
                *(r["rows"][k]["median"][f"disk_write_bytes_per_s {w}"] / 1e9 for w in ("/tmp", "/dev/shm")),
            ),
            f"| {name} | " + PLAIN,
        )
        for k, name, row, disk in (
            (0, "CLIP-L-sized", (5343, 5513, 1.03, 4391, 0.82, 4202, 0.79), (4.8, 2.8)),
            (1, "T5-XL-sized", (2122, 2224, 1.05, 1115, 0.53, 1180, 0.56), (4.7, 3.7)),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "the 1.49 GB that T5-XL's 12,000 captions make takes 0.3 s to write at the plain rate, against the 5 s the "
        "writer lost",
        F9_RATE,
        lambda r: (
            r["rows"][1]["median"]["bytes_written /tmp"] / 1e9,
            r["rows"][1]["captions"],
            r["rows"][1]["median"]["bytes_written /tmp"] / r["rows"][1]["median"]["disk_write_bytes_per_s /tmp"],
            _lost(r["rows"][1]),
        ),
        "the {:.2f} GB that T5-XL's {:,} captions make takes {:.1f} s to write at the plain rate, against the {:.0f} s "
        "the writer lost",
    ),
    Figure((BENCHMARKS,), "about the 5 s lost", F9_RATE, lambda r: (_lost(r["rows"][1]),), "about the {:.0f} s lost"),
    Figure((BENCHMARKS,), "about its 0.5 s", F9_RATE, lambda r: (_lost(r["rows"][0]),), "about its {:.1f} s"),
    Figure(
        (BENCHMARKS,),
        "CLIP-L's reaches 94% with them on disk and 98% in memory, its rounds 91–95% and 90–100% (its encoder alone "
        "varied 4,231–4,960 between rounds)",
        F9_RATE2,
        lambda r: (
            _rate_row(r["rows"][0])[4],
            _rate_row(r["rows"][0])[6],
            *(
                x
                for w in ("/tmp", "/dev/shm")
                for x in (100 * min(_of_alone(r["rows"][0], w)), max(_of_alone(r["rows"][0], w)))
            ),
            *(f(x["encoder_alone_per_s"] for x in r["rows"][0]["rounds"]) for f in (min, max)),
        ),
        "CLIP-L's reaches {:.0%} with them on disk and {:.0%} in memory, its rounds {:.0f}–{:.0%} and {:.0f}–{:.0%} "
        "(its encoder alone varied {:,.0f}–{:,.0f} between rounds)",
    ),
    Figure(
        (BENCHMARKS,),
        "2.3× as many captions/s to disk (11,276 against 4,922) and the encoder alone ran 2.5× as fast (13,786 against "
        "5,435)",
        F9_GRAPHS[:2],
        lambda e, g: tuple(
            x
            for k in (3, 0)
            for x in (
                _rate_row(g["rows"][0])[k] / _rate_row(e["rows"][0])[k],
                *(_rate_row(r["rows"][0])[k] for r in (g, e)),
            )
        ),
        "{:.1f}× as many captions/s to disk ({:,.0f} against {:,.0f}) and the encoder alone ran {:.1f}× as fast "
        "({:,.0f} against {:,.0f})",
    ),
    Figure((BENCHMARKS,), "82% on disk", F9_GRAPHS[1], lambda g: (_rate_row(g["rows"][0])[4],), "{:.0%} on disk"),
    Figure(
        (BENCHMARKS,),
        "the tokenizer's call took 70% of `encode`'s samples",
        F9_GRAPHS[1].replace("encoder_rates.json", "profile_1round_rates.json"),
        _tokenizer_share,
        "the tokenizer's call took {:.0%} of `encode`'s samples",
    ),
    Figure(  # each run's first round of "alone" is its lowest: the graphs and kernels were still warming up
        (BENCHMARKS,),
        'first rounds of "alone" ran low in every run, 3,584–11,787',
        F9_GRAPHS,
        lambda *runs: tuple(f(r["rows"][0]["rounds"][0]["encoder_alone_per_s"] for r in runs) for f in (min, max)),
        'first rounds of "alone" ran low in every run, {:,.0f}–{:,.0f}',
    ),
    Figure(
        (BENCHMARKS,),
        "The encoder alone varied 3,896–5,788 (CLIP-L) and 1,987–2,320 (T5-XL) between rounds; the writer without "
        "files ran above it in 2 of 6 rounds",
        F9_RATE,
        lambda r: (
            *(f(x["encoder_alone_per_s"] for x in row["rounds"]) for row in r["rows"] for f in (min, max)),
            sum(x["writer_no_files_per_s"] > x["encoder_alone_per_s"] for row in r["rows"] for x in row["rounds"]),
            sum(len(row["rounds"]) for row in r["rows"]),
        ),
        "The encoder alone varied {:,.0f}–{:,.0f} (CLIP-L) and {:,.0f}–{:,.0f} (T5-XL) between rounds; the writer "
        "without files ran above it in {} of {} rounds",
    ),
    Figure(  # T5-XL only: in rate/ CLIP-L's writer reached 152% of an "alone" that ran low, outside the doc's 79–86%
        (BENCHMARKS,),
        "the writer with files reached 65–70% (T5-XL)",
        EARLIER,
        lambda *runs: tuple(
            f(r["rows"][1]["writer_per_s"] / r["rows"][1]["encoder_alone_per_s"] for r in runs) * s
            for f, s in ((min, 100), (max, 1))
        ),
        "the writer with files reached {:.0f}–{:.0%} (T5-XL)",
    ),
    Figure(
        (BENCHMARKS,),
        'with the "alone" figure varying up to 2× between runs',
        EARLIER,
        lambda *runs: (
            max(
                max(r["rows"][k]["encoder_alone_per_s"] for r in runs)
                / min(r["rows"][k]["encoder_alone_per_s"] for r in runs)
                for k in (0, 1)
            ),
        ),
        'with the "alone" figure varying up to {:.0f}× between runs',
    ),
    # on 4 GPUs: convert --vae and convert --text-encoder
    *(  # what each change between the T5-XL rows did to the encoding's pace on 4 GPUs
        Figure(
            (BENCHMARKS,),
            text,
            (*F9_CONVERT[before], *F9_CONVERT[after]),
            lambda *r: (_convert_row(*r[:4])[-1], _convert_row(*r[4:])[-1]),
            "{:.2f}× → {:.2f}×",
        )
        for before, after, text in (
            ("t5_stages", "listed", "1.41× → 1.56×"),
            ("listed", "host_group", "1.56× → 1.73×"),
            ("host_group", "raw_send", "1.73× → 2.95×"),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "rank 0's encoding thread in `gather_object` for 3.7 of 9.5 s",
        HOST_GROUP,
        lambda m: _gather(m)[1:3],
        "rank 0's encoding thread in `gather_object` for {:.1f} of {:.1f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "(T5-XL's are 4 KiB a token, about 0.9 GB from 3 ranks)",
        HOST_GROUP,
        lambda m: (_gather(m)[0], _gather(m)[3]),
        "(T5-XL's are {:.0f} KiB a token, about {:.1f} GB from 3 ranks)",
    ),
    Figure(
        (BENCHMARKS,),
        "(4.59 s against 10.46 s: at batch 64 T5-XL's step is not bound by its arithmetic), and 4 GPUs gain less "
        "(2.17×)",
        (*F9_BS256, F9_CONVERT["raw_send"][0]),
        lambda *r: (_stage(r[0], ENCODE_STAGE), _stage(r[4], ENCODE_STAGE), _convert_row(*r[:4])[-1]),
        "({:.2f} s against {:.2f} s: at batch 64 T5-XL's step is not bound by its arithmetic), and 4 GPUs gain less "
        "({:.2f}×)",
    ),
    Figure(
        (BENCHMARKS,),
        '("text: finish" 4.4–4.6 s against 2.1–3.5 s of encoding)',
        RAW_SEND_4,
        lambda *m: tuple(f(_stage(x, s) for x in m) for s in ("text: finish", ENCODE_STAGE) for f in (min, max)),
        '("text: finish" {:.1f}–{:.1f} s against {:.1f}–{:.1f} s of encoding)',
    ),
    Figure(
        (BENCHMARKS,),
        "before the encoder is imported and loaded (8–13 s here)",
        T5_ROWS,
        lambda *m: tuple(
            f(_stage(x, "import transformers") + _stage(x, "load the text encoder") for x in m) for f in (min, max)
        ),
        "before the encoder is imported and loaded ({:.0f}–{:.0f} s here)",
    ),
    # method
    Figure(  # the widest half-range of identical runs over a cell's median, over finding 2's eager grid
        (BENCHMARKS,),
        "(±13% in finding 2)",
        F2,
        lambda rows: (max(_half_range(rows, cell) for cell in {_cell(r) for r in rows}),),
        "(±{:.0%} in finding 2)",
    ),
    *(
        Figure((BENCHMARKS,), f"| {name} " + XROW.format(*row), XCHECK.format(run), _xcheck, f"| {name} " + XROW)
        for (name, run), row in zip(
            XRUNS,
            (
                (0.009, 0.013, 0.41, 0.226),
                (0.681, 0.682, 0.11, 0.711),
                (0.005, 0.005, 0.08, 0.634),
                (0.025, 0.025, 0.05, 0.633),
                (0.116, 0.117, 0.04, 0.754),
            ),
            strict=True,
        )
    ),
    Figure(
        (BENCHMARKS,),
        "two agree within 0.41 percentage points",
        tuple(XCHECK.format(run) for _, run in XRUNS),
        lambda *runs: (max(abs(_xcheck(r)[2]) for r in runs),),
        "two agree within {:.2f} percentage points",
    ),
)
UNCHECKED = {
    BENCHMARKS: {
        "5 GB": "not kept: the size of T5-XL's weights on disk ('about'), which no result under bench/results records",
        "0.5 GB": "not kept: the size of CLIP-L's weights on disk ('about'), which no result under bench/results holds",
        "4.9 GB": "not kept: the size of T5-XL's weights on disk, which no result under bench/results records",
        "30 ms": "a setting of the CPU stand-in encoder (how long it holds the GIL a batch), not a measurement",
        "1.5 GB": "a setting of the CPU stand-in encoder (the size of its weights), not a measurement",
        "80–84%": "not kept: the CPU stand-in's rates before the hash moved; no result under bench/results holds them",
        "94–98%": "not kept: the CPU stand-in's rates after the hash moved; no result under bench/results holds them",
        "3.3×": "the goal for the whole --vae command on 4 GPUs, a threshold",
        "3.6×": "the goal for the whole --text-encoder command on 4 GPUs, a threshold",
        "20%": "a threshold (highly input-bound), as TensorFlow's input-pipeline analyzer says",
    }
}
