"""The checkpoint-interval sweep on the Slurm testbed against Young's and Daly's
intervals: per interval, the mean wall clock over the useful time (measured and the
model's), and the vertex of a parabola in log τ through the three points."""

import json
import math
import statistics
from pathlib import Path

from scalestudy.results.analysis.goodput import daly_interval, young_interval

HERE = Path(__file__).parent
MTBF_S = 60.0


def main() -> None:
    by: dict[int, list[dict]] = {}
    for f in HERE.glob("sweep-*.json"):
        d = json.loads(f.read_text())
        by.setdefault(d["every_steps"], []).extend(d["rows"])
    print("| every (steps) | τ s | failures | work s | wall s | wall / work | model | C s |")
    print("|---|---|---|---|---|---|---|---|")
    pts = []
    for every, rs in sorted(by.items()):
        tau = statistics.mean(r["tau_s"] for r in rs)
        ratio = statistics.mean(r["wall_s"] / r["work_s"] for r in rs)
        model = statistics.mean(r["model_wall_s"] / r["work_s"] for r in rs)
        pts.append((tau, ratio, model))
        walls = ", ".join(format(r["wall_s"], ".0f") for r in rs)
        print(f"| {every} | {tau:.2f} | {', '.join(str(r['failures']) for r in rs)} | "
              f"{statistics.mean(r['work_s'] for r in rs):.0f} | {walls} | {ratio:.3f} | "
              f"{model:.3f} | {statistics.mean(r['save_s'] for r in rs):.3f} |")
    save = statistics.median(r["save_s"] for rs in by.values() for r in rs)
    print(f"C (median save) {save:.3f} s, M {MTBF_S:.0f} s: Young "
          f"{young_interval(save, MTBF_S):.2f} s, Daly {daly_interval(save, MTBF_S):.2f} s")
    if len(pts) != 3:
        return
    (x1, x2, x3) = (math.log(t) for t, _, _ in pts)
    for label, ys in (("measured", [p[1] for p in pts]), ("model", [p[2] for p in pts])):
        y1, y2, y3 = ys
        den = (x1 - x2) * (x1 - x3) * (x2 - x3)
        a = (x3 * (y2 - y1) + x2 * (y1 - y3) + x1 * (y3 - y2)) / den
        b = (x3**2 * (y1 - y2) + x2**2 * (y3 - y1) + x1**2 * (y2 - y3)) / den
        vertex = math.exp(-b / (2 * a)) if a > 0 else float("nan")
        print(f"{label}: best of the three {pts[ys.index(min(ys))][0]:.2f} s; parabola in "
              f"log τ: vertex {vertex:.2f} s")


if __name__ == "__main__":
    main()
