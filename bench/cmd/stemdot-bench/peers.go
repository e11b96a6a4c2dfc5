package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/bench"
)

// peerReport is the JSON line a peer script prints (bench/peers/common.py).
type peerReport struct {
	Peer  string `json:"peer"`
	Cases []struct {
		Masks   string    `json:"masks"`
		Out     string    `json:"out"`
		Seconds []float64 `json:"times_s"`
		Warmup  float64   `json:"warmup_s"`
	} `json:"cases"`
	Extra map[string]any `json:"-"`
}

// runPeers runs numpy, LiberTEM and (with GPUs) CuPy on d, with the CPUs of the cpu-all
// plan's workers (and of the cpu-1 plan with -peers-one-core). The all-cores numpy
// results become the references of the stemdot checks; every peer result is checked
// too (numpy's against the float64 sample, the others against numpy's).
func runPeers(cfg *config, env *machine, d *benchData, mcs []*caseMasks, plans []namedPlan, rep *bench.Report) ([]bench.Row, error) {
	for _, mc := range mcs {
		if err := os.Remove(mc.reference); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	skip := func(what, reason string) {
		s := bench.Skip{What: what, Reason: reason}
		if !containsSkip(rep.Skipped, s) {
			rep.Skipped = append(rep.Skipped, s)
			log("skipped %s: %s", what, reason)
		}
	}
	if cfg.python == "" {
		skip("peers", "no Python interpreter given (-python)")
		return nil, nil
	}
	if _, err := os.Stat(cfg.python); err != nil {
		skip("peers", fmt.Sprintf("no Python environment at %s (make bench creates it with pip install numpy libertem; the package index may be unreachable)", cfg.python))
		return nil, nil
	}
	var cpuSets [][]int
	for _, p := range plans {
		if p.name == "cpu-all" || (p.name == "cpu-1" && cfg.oneCore) {
			var cpus []int
			for _, w := range p.plan.Workers {
				cpus = append(cpus, w.CPU)
			}
			cpuSets = append(cpuSets, cpus)
		}
	}
	peers := []string{bench.NumPy, bench.LiberTEM, bench.CuPy}
	var rows []bench.Row
	for _, peer := range peers {
		if peer == bench.CuPy && len(env.GPUs) == 0 {
			skip(peer, "no GPU found (NVML)")
			continue
		}
		for si, cpus := range cpuSets {
			outs := make([]string, len(mcs))
			for i, mc := range mcs {
				outs[i] = filepath.Join(filepath.Dir(mc.npyPath), fmt.Sprintf("result_%s_%s_%s_%dw.npy", filepath.Base(d.path), mc, peer, len(cpus)))
				if peer == bench.NumPy && si == 0 {
					outs[i] = mc.reference
				}
			}
			pr, err := runPeer(cfg, peer, d, mcs, outs, cpus)
			if err != nil {
				skip(fmt.Sprintf("%s (%d workers)", peer, len(cpus)), err.Error())
				continue
			}
			recordVersions(rep, pr)
			for i, mc := range mcs {
				c := pr.Cases[i]
				row := bench.Row{Source: peer, DType: d.dt.String(), Masks: mc.N, MaskKind: mc.Kind, Plan: peer,
					Workers: len(cpus), Frames: d.frames(), Bytes: d.bytes(), Seconds: c.Seconds}
				ref, err := loadReference(mc.reference, d.frames()*mc.N)
				if err != nil {
					return nil, err
				}
				if peer == bench.NumPy && si == 0 {
					ref = nil // the reference itself: checked against the float64 sample only
				}
				got, err := loadReference(c.Out, d.frames()*mc.N)
				if err != nil || got == nil {
					return nil, fmt.Errorf("%s result %s: %v", peer, c.Out, err)
				}
				sample, err := sampledReference(d.ds, d.dt, d.frames(), mc)
				if err != nil {
					return nil, err
				}
				if row.Check, err = checkResult(got, mc.N, ref, sample); err != nil {
					return nil, fmt.Errorf("RESULT CHECK FAILED: peer %s (%d workers), %s, masks %s: %w", peer, len(cpus), d.dt, mc, err)
				}
				log("peer %-8s %-7s masks %-4s %d workers: %.3f GB/s (warm-up %.1f s; %s)", peer, d.dt, mc, len(cpus), row.GBps(), c.Warmup, row.Check)
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

// runPeer runs one peer script for all cases of d and parses its report.
func runPeer(cfg *config, peer string, d *benchData, mcs []*caseMasks, outs []string, cpus []int) (*peerReport, error) {
	data, err := filepath.Abs(d.path)
	if err != nil {
		return nil, err
	}
	cpuList := make([]string, len(cpus))
	for i, c := range cpus {
		cpuList[i] = strconv.Itoa(c)
	}
	args := []string{filepath.Join(cfg.peersDir, peer+"_peer.py"), "--data", data, "--dtype", d.dt.String(),
		"--nav", fmt.Sprintf("%d,%d", d.nav[0], d.nav[1]), "--sig", fmt.Sprintf("%d,%d", sig[0], sig[1]),
		"--cpus", strings.Join(cpuList, ","), "--repeats", strconv.Itoa(cfg.repeats)}
	for i, mc := range mcs {
		kind := "dense"
		if mc.Kind == sparseRing {
			kind = "sparse"
		}
		args = append(args, "--case", mc.npyPath+":"+outs[i]+":"+kind)
	}
	log("running %s peer on %s with CPUs %v", peer, d.path, cpus)
	cmd := exec.Command(cfg.python, args...)
	cmd.Env = os.Environ()
	if peer == bench.NumPy {
		// OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, set on some machines for old OpenBLAS
		// builds, slow a current numpy: unset for this command alone; the kernel numpy
		// then runs is recorded (threadpoolctl).
		cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool {
			return strings.HasPrefix(kv, "OPENBLAS_CORETYPE=") || strings.HasPrefix(kv, "OPENBLAS_L2_SIZE=")
		})
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s failed (%v): %s", peer, err, lastLines(stderr.String(), 3))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := []byte(lines[len(lines)-1])
	pr := &peerReport{}
	if err := json.Unmarshal(last, pr); err != nil {
		return nil, fmt.Errorf("%s: bad report %q: %w", peer, last, err)
	}
	if err := json.Unmarshal(last, &pr.Extra); err != nil {
		return nil, err
	}
	if len(pr.Cases) != len(mcs) {
		return nil, fmt.Errorf("%s reported %d cases, want %d", peer, len(pr.Cases), len(mcs))
	}
	return pr, nil
}

// recordVersions copies a peer's versions and settings into the machine description.
func recordVersions(rep *bench.Report, pr *peerReport) {
	m := rep.Machine
	for _, k := range []string{"numpy", "python", "libertem", "cupy", "device"} {
		if v, ok := pr.Extra[k]; ok {
			m[k] = v
		}
	}
	switch pr.Peer {
	case bench.NumPy:
		m["numpy_blas"] = pr.Extra["blas"]
		m["numpy_chunk_bytes"] = pr.Extra["chunk_bytes"]
	case bench.LiberTEM:
		m["libertem_executor"] = pr.Extra["executor"]
		m["libertem_partitions"] = pr.Extra["partitions"]
	case bench.CuPy:
		m["cupy_h2d_s"] = pr.Extra["h2d_s"]
		m["cupy_h2d_bytes"] = pr.Extra["h2d_bytes"]
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
