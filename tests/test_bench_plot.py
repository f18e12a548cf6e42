"""`bench --plot`: its folder is made as `--output` makes its own, a file in the way fails before
the benchmark runs, and the latency panel shows every outlier (a stall is neither cut off nor
allowed to squash the boxes flat)."""

import pytest

from edgeapp.errors import ExitCode

pytest.importorskip("matplotlib", reason="pip install 'edgeapp[plot]'")


def test_plot_makes_its_folder_as_output_does(cli, tiny_model, bench_env):
    plot = bench_env / "plots" / "today" / "b1.png"
    runs = bench_env / "runs" / "r.jsonl"
    r = cli("bench", tiny_model, "-d", "cpu", "--runs", "3", "--plot", plot, "-o", runs)
    assert r.exit_code == 0, r.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert runs.read_text().count("\n") == 1
    assert f"plot written to {plot}" in r.stderr


def test_a_file_in_the_way_of_the_plot_fails_before_benchmarking(cli, tiny_model, bench_env):
    blocker = bench_env / "plots"
    blocker.write_text("not a folder")
    r = cli("bench", tiny_model, "-d", "cpu", "--runs", "3", "--plot", blocker / "b1.png")
    assert r.exit_code == ExitCode.USAGE
    assert f"{blocker} is a file, not a folder" in r.stderr
    assert r.stdout == "" and "threads" not in r.stderr  # nothing was measured


def test_the_latency_panel_shows_a_stall_with_the_boxes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from edgeapp.sinks.plots import latency_panel, outliers

    steady = [0.43 + 0.001 * (i % 7) for i in range(99)]
    fig, ax = plt.subplots()
    latency_panel(ax, {"cpu (1 thread)": steady + [113.0], "cpu (2 threads)": [0.44] * 100})
    assert ax.get_yscale() == "log"  # the 0.43 ms boxes and the 113 ms stall both on the axis
    low, high = ax.get_ylim()
    assert low < 0.43 and high >= 113.0
    assert outliers(steady + [113.0]) == 1 and "1 outlier(s) as dots" in ax.get_title()
    plt.close(fig)

    fig, ax = plt.subplots()
    latency_panel(ax, {"cpu": steady})
    assert ax.get_yscale() == "linear" and "0 outlier(s)" in ax.get_title()
    plt.close(fig)
