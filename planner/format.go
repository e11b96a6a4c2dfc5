package planner

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
)

// jsonPlan is the JSON form of a Plan; its keys are a stable interface (scripts,
// benchmarks) and must not change.
type jsonPlan struct {
	CoresUsable   int          `json:"cores_usable"`
	ReservedCores []int        `json:"reserved_cores,omitempty"`
	Workers       []jsonWorker `json:"workers"`
	Partitions    [][2]int     `json:"partitions,omitempty"`
	Warnings      []string     `json:"warnings,omitempty"`
}

type jsonWorker struct {
	Kind Kind `json:"kind"`
	Core int  `json:"core"`
	CPU  int  `json:"cpu"`
	GPU  *int `json:"gpu,omitempty"`
}

// MarshalJSON writes the plan as
//
//	{"cores_usable": 16,
//	 "reserved_cores": [0, ...],
//	 "workers": [{"kind": "gpu", "core": 0, "cpu": 0, "gpu": 0}, {"kind": "cpu", "core": 1, "cpu": 1}, ...],
//	 "partitions": [[first_frame, end_frame], ...],
//	 "warnings": ["...", ...]}
//
// with "reserved_cores" the Keys of the physical cores reserved for GPU workers (in
// worker order), workers in Plan.Workers order ("gpu" only for GPU workers: the device
// index), "core" the physical core's Key, "cpu" the pinned logical CPU id, partitions as
// half-open frame ranges; "reserved_cores", "partitions" and "warnings" are left out
// when empty.
func (p *Plan) MarshalJSON() ([]byte, error) {
	out := jsonPlan{CoresUsable: p.CoresUsable, ReservedCores: p.reservedCores(),
		Workers: make([]jsonWorker, len(p.Workers)), Warnings: p.Warnings}
	for i, w := range p.Workers {
		out.Workers[i] = jsonWorker{Kind: w.Kind, Core: w.Core, CPU: w.CPU}
		if w.Kind == GPU {
			out.Workers[i].GPU = &w.GPU
		}
	}
	for _, part := range p.Partitions {
		out.Partitions = append(out.Partitions, [2]int{part.Start, part.End})
	}
	return json.Marshal(out)
}

// reservedCores are the Keys of the cores of the GPU workers, in worker order.
func (p *Plan) reservedCores() []int {
	var keys []int
	for _, w := range p.Workers {
		if w.Kind == GPU {
			keys = append(keys, w.Core)
		}
	}
	return keys
}

// String describes the plan for people: a summary line, one line per worker (kind,
// core, pinned CPU, GPU), the cores reserved for GPU workers, the partition count and
// sizes in frames and MiB of float32 frames, and the warnings.
func (p *Plan) String() string {
	var b strings.Builder
	reserved := p.reservedCores()
	nGPU := len(reserved)
	fmt.Fprintf(&b, "plan: %s (%d GPU, %d CPU) on %s\n",
		plural(len(p.Workers), "worker"), nGPU, len(p.Workers)-nGPU, plural(p.CoresUsable, "usable core"))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  worker\tkind\tcore\tcpu\tgpu")
	for _, w := range p.Workers {
		gpu := "-"
		if w.Kind == GPU {
			gpu = fmt.Sprint(w.GPU)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\n", w.ID, w.Kind, w.Core, w.CPU, gpu)
	}
	tw.Flush()
	if len(reserved) > 0 {
		fmt.Fprintf(&b, "reserved for GPU workers: cores %s\n", joinInts(reserved))
	}
	if len(p.Partitions) == 0 {
		b.WriteString("partitions: none (no dataset)\n")
	} else {
		lo, hi := p.Partitions[0].Frames(), p.Partitions[0].Frames()
		for _, part := range p.Partitions {
			lo, hi = min(lo, part.Frames()), max(hi, part.Frames())
		}
		mib := func(frames int) string {
			return fmt.Sprintf("%.1f", float64(int64(frames)*p.FrameBytes)/(1<<20))
		}
		frames, size := fmt.Sprint(lo), mib(lo)
		if hi != lo {
			frames, size = fmt.Sprintf("%d-%d", lo, hi), mib(lo)+"-"+mib(hi)
		}
		fmt.Fprintf(&b, "partitions: %d of %s frames (%s MiB each), frames [0, %d)\n",
			len(p.Partitions), frames, size, p.Partitions[len(p.Partitions)-1].End)
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return b.String()
}

// plural is "n noun", with an s for n != 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
