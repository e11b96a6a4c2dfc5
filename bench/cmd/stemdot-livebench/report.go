package main

import (
	"fmt"
	"os"
)

// key names one receiver's runs of one input.
type key struct{ input, receiver, proto string }

// runsOf returns the runs of k by repeat.
func runsOf(rep *report, k key) map[int]measured {
	out := map[int]measured{}
	for _, m := range rep.Runs {
		if (key{m.Input, m.Receiver, m.Protocol}) == k {
			out[m.Repeat] = m
		}
	}
	return out
}

// pairRatio is f(a)/f(b) taken repeat by repeat.
func pairRatio(rep *report, a, b key, f func(measured) float64) stat {
	ra, rb := runsOf(rep, a), runsOf(rep, b)
	var v []float64
	for r, x := range ra {
		if y, ok := rb[r]; ok {
			v = append(v, f(x)/f(y))
		}
	}
	return stats(v)
}

func framesPerS(m measured) float64  { return m.FramesPerS }
func cpuPerFrame(m measured) float64 { return m.CPUS / float64(m.Frames) }

// coresBusy is the CPU seconds of receiver and sender together over the acquisition's
// seconds: the machine's core count means all its cores were theirs throughout.
func coresBusy(m measured) float64 { return (m.CPUS + m.SenderCPUS) / m.Seconds }

// cpuCap is the rate in frames/s at which receiver and sender together would keep
// cores cores busy: the bound their CPU time a frame sets on a machine of that many
// cores, free of other work.
func cpuCap(m measured, cores int) float64 {
	return float64(cores) * float64(m.Frames) / (m.CPUS + m.SenderCPUS)
}

func summarise(rep *report, benches []*bench) {
	seen := map[key]bool{}
	for _, m := range rep.Runs {
		k := key{m.Input, m.Receiver, m.Protocol}
		if seen[k] {
			continue
		}
		seen[k] = true
		var fps, gbs, cpu, snd []float64
		for _, x := range runsOf(rep, k) {
			fps, gbs, cpu = append(fps, x.FramesPerS), append(gbs, x.GBPerS), append(cpu, x.CPUPer10k)
			snd = append(snd, x.SenderCPUS/float64(x.Frames)*1e4)
		}
		rep.Figures = append(rep.Figures, figure{Input: k.input, Receiver: k.receiver, Protocol: k.proto,
			FramesPerS: stats(fps), GBPerS: stats(gbs), CPUPer10k: stats(cpu), SenderCPUPer10k: stats(snd)})
	}
	for _, b := range benches {
		name := b.in.Name
		for _, p := range b.protos {
			rep.Ratios = append(rep.Ratios, ratio{"stemdot/floor frames/s, " + p, name,
				pairRatio(rep, key{name, "stemdot", p}, key{name, "floor", p}, framesPerS)})
		}
		lt, sd := key{name, "libertem-live", b.libertem}, key{name, "stemdot", b.libertem}
		if len(runsOf(rep, lt)) > 0 {
			rep.Ratios = append(rep.Ratios,
				ratio{"stemdot/LiberTEM-live frames/s, " + b.libertem, name, pairRatio(rep, sd, lt, framesPerS)},
				ratio{"LiberTEM-live/stemdot CPU s a frame, " + b.libertem, name, pairRatio(rep, lt, sd, cpuPerFrame)})
		}
	}
	rep.Targets = targets(rep, benches)
}

func findRatio(rep *report, input, name string) (stat, bool) {
	for _, r := range rep.Ratios {
		if r.Input == input && r.Name == name {
			return r.stat, r.N > 0
		}
	}
	return stat{}, false
}

func findFigure(rep *report, k key) (figure, bool) {
	for _, f := range rep.Figures {
		if (key{f.Input, f.Receiver, f.Protocol}) == k {
			return f, f.FramesPerS.N > 0
		}
	}
	return figure{}, false
}

// bound says what the figures show about a receiver's rate: the floor's rate against
// the target, stemdot's rate over the floor's, the cores busy (receiver and sender).
func bound(rep *report, k key, goal float64, unit func(figure) stat) string {
	f, ok := findFigure(rep, k)
	fl, okf := findFigure(rep, key{k.input, "floor", k.proto})
	if !ok || !okf {
		return ""
	}
	cores, _ := rep.Machine["cores"].(int)
	var busy, caps []float64
	for _, m := range runsOf(rep, k) {
		busy, caps = append(busy, coresBusy(m)), append(caps, cpuCap(m, cores))
	}
	r, _ := findRatio(rep, k.input, "stemdot/floor frames/s, "+k.proto)
	return fmt.Sprintf("floor %s (%.2f of the target), stemdot/floor %.2f; receiver + sender kept %.2f of the %d cores busy (median); CPU s/10k frames: receiver %.3f, sender %.3f, which cap %d free cores at %s frames/s",
		fmtStat(unit(fl)), unit(fl).Median/goal, r.Median, stats(busy).Median, cores, f.CPUPer10k.Median, f.SenderCPUPer10k.Median, cores, fmtNum(stats(caps).Median))
}

func targets(rep *report, benches []*bench) []target {
	var out []target
	gb := func(f figure) stat { return f.GBPerS }
	fps := func(f figure) stat { return f.FramesPerS }
	rate := func(what string, k key, goal float64, unit func(figure) stat, units string) {
		f, ok := findFigure(rep, k)
		if !ok {
			return
		}
		s := unit(f)
		t := target{Target: fmt.Sprintf("%s ≥ %s %s", what, fmtNum(goal), units), Measured: fmtStat(s) + " " + units,
			Ratio: fmt.Sprintf("%.2f", s.Median/goal), Met: s.Median >= goal}
		t.Note = bound(rep, k, goal, unit)
		out = append(out, t)
	}
	for _, b := range benches {
		name := b.in.Name
		switch name {
		case "dectris192":
			rate("DECTRIS 192×192 bslz4, stream v2", key{name, "stemdot", "v2"}, 30000, fps, "frames/s")
			rate("DECTRIS 192×192 bslz4, stream v1", key{name, "stemdot", "v1"}, 30000, fps, "frames/s")
		case "dectris96":
			rate("DECTRIS 96×96 bslz4, stream v2", key{name, "stemdot", "v2"}, 120000, fps, "frames/s")
			rate("DECTRIS 96×96 bslz4, stream v1", key{name, "stemdot", "v1"}, 120000, fps, "frames/s")
		case "merlin":
			rate("Merlin 256×256 12-bit raw", key{name, "stemdot", "tcp"}, 1.25, gb, "GB/s")
			if r, ok := findRatio(rep, name, "stemdot/floor frames/s, tcp"); ok {
				out = append(out, target{Target: "Merlin: stemdot live ≥ 0.8 of the socket-only reader", Measured: fmtStat(r),
					Ratio: fmt.Sprintf("%.2f", r.Median/0.8), Met: r.Median >= 0.8})
			}
		}
		if r, ok := findRatio(rep, name, "LiberTEM-live/stemdot CPU s a frame, "+b.libertem); ok {
			out = append(out, target{Target: fmt.Sprintf("%s: ≥ 5× less CPU a frame than LiberTEM-live (%s)", name, b.libertem),
				Measured: fmtStat(r) + "×", Ratio: fmt.Sprintf("%.2f", r.Median/5), Met: r.Median >= 5})
		}
	}
	return out
}

func fmtNum(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func fmtStat(s stat) string {
	return fmt.Sprintf("%s (%s–%s)", fmtNum(s.Median), fmtNum(s.Min), fmtNum(s.Max))
}

// printTables writes the report's tables in Markdown, for bench/RESULTS.md.
func printTables(rep *report) {
	w := os.Stdout
	fmt.Fprintf(w, "\n%s, %s, %v cores, load average %v before and %v after; commit %s; %s\n\n",
		rep.Date, rep.Machine["cpu"], rep.Machine["cores"], rep.Machine["loadavg_before"], rep.Machine["loadavg_after"], rep.Commit, rep.Versions["libertem-live"])
	fmt.Fprintln(w, "| target | measured: median (min–max) | median / target | met | what bounds it |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, t := range rep.Targets {
		met := "yes"
		if !t.Met {
			met = "**no**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", t.Target, t.Measured, t.Ratio, met, t.Note)
	}
	fmt.Fprintln(w, "\n| input | receiver | protocol | frames/s | GB/s (wire) | CPU s / 10k frames | sender CPU s / 10k frames |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, f := range rep.Figures {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", f.Input, f.Receiver, f.Protocol, fmtStat(f.FramesPerS),
			fmtStat(f.GBPerS), fmtStat(f.CPUPer10k), fmtStat(f.SenderCPUPer10k))
	}
	fmt.Fprintln(w, "\n| input | ratio, pair by pair | median (min–max) | pairs |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range rep.Ratios {
		fmt.Fprintf(w, "| %s | %s | %s | %d |\n", r.Input, r.Name, fmtStat(r.stat), r.N)
	}
	fmt.Fprintln(w)
	for _, in := range rep.Inputs {
		fmt.Fprintf(w, "- input %s: %s, %d distinct frames of %d×%d %s, %.0f bytes a frame on the wire", in.Name, in.File, in.Frames, in.Sig[0], in.Sig[1], in.DType, in.FrameBytes)
		if in.Ratio > 1 {
			fmt.Fprintf(w, " (compression ratio %.1f)", in.Ratio)
		}
		fmt.Fprintln(w)
	}
	for _, c := range rep.Checks {
		fmt.Fprintln(w, "- check:", c)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintln(w, "- skipped:", s)
	}
}
