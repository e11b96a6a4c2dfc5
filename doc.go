// Package stemdot is the front door of the stemdot engine: open a 4D-STEM dataset, build
// or load masks (virtual detectors), and apply them on the workers planned for this
// machine, in one call each:
//
//	ds, err := stemdot.Open("scan.mib", stemdot.Options{})
//	defer ds.Close()
//	stack, err := stemdot.Masks(ds.SigShape(), "disk:128,128,20", "com")
//	res, err := stemdot.Apply(ctx, ds, stack, stemdot.Plan{GPUs: "auto"}, stemdot.ApplyOptions{})
//	err = stemdot.SaveNPY("result.npy", res)
//
// The result holds, for every frame f (scan position, row-major over nav_shape) and
// every mask m, out[f, m] = Σ_{y,x} mask[m, y, x]·frame_f[y, x], as LiberTEM's
// ApplyMasksUDF computes it: shape nav_shape + (n_masks,), float32 (or float64).
//
// Each concern lives here once, for a Go caller and for the front ends (the CLI
// cmd/stemdot, the C ABI cmd/libstemdot, the viewer, the bench): the dataset options and their
// names (OpenOptions), planning on this machine (CPU topology and affinity, GPU
// discovery, the planner) in Plan, the validation of a job in Apply, and atomic output
// in Save. Errors are classified by package errs (errs.KindOf). Errors and warnings name
// the options as a Go caller sets them ("give Options.NavShape", Plan.GPUs,
// Outputs.NPY), from one table of names that also gives the CLI's flags (--nav-shape)
// and the C ABI's keys (option nav_shape); the front ends' plumbing (that renaming,
// shape parsing) is in package internal/frontend, off this API.
//
// The packages below do one step each: dataset (files), masks (mask stacks), planner
// (the resource plan as a pure function), engine (the executor), affinity (this
// machine's CPUs and GPUs), cuda (the GPU kernels' bindings).
package stemdot
