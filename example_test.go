package stemdot_test

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
)

// frames2x2 is a scan of 2×2 positions of 4×4 uint16 frames: frame f holds f+1 at
// pixel (y=1, x=f) and 0 elsewhere.
func frames2x2() dataset.Dataset {
	data := make([]byte, 4*4*4*2)
	for f := range 4 {
		binary.NativeEndian.PutUint16(data[(f*16+4+f)*2:], uint16(f+1))
	}
	ds, err := dataset.FromMemory(data, []int{2, 2}, [2]int{4, 4}, dataset.Uint16)
	if err != nil {
		panic(err)
	}
	return ds
}

// Apply a virtual bright field (a rectangle over the frame's left half) and a single
// pixel to in-memory frames, on one CPU worker.
func ExampleApply() {
	ds := frames2x2()
	defer ds.Close()
	stack, err := stemdot.Masks(ds.SigShape(), "rect:0,0,2,4", "point:3,1")
	if err != nil {
		panic(err)
	}
	res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.NavShape, res.Names)
	for f := range 4 {
		fmt.Println(f, res.Value(f, 0), res.Value(f, 1))
	}
	// Output:
	// [2 2] [rect point]
	// 0 1 0
	// 1 2 0
	// 2 0 0
	// 3 0 4
}

// Centre-of-mass shifts in pixels: the com masks' moments divided by their sum,
// relative to the reference point (sig_x/2, sig_y/2) = (2, 2) of a 4×4 frame, as in
// LiberTEM. Frame f has all its counts at (y=1, x=f).
func ExampleCOMShifts() {
	ds := frames2x2()
	defer ds.Close()
	stack, err := stemdot.Masks(ds.SigShape(), "com")
	if err != nil {
		panic(err)
	}
	res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{Float64: true})
	if err != nil {
		panic(err)
	}
	shifts, err := stemdot.COMShifts(res, 0) // the com spec's com_sum, com_y, com_x: masks 0 to 2
	if err != nil {
		panic(err)
	}
	for f := range 4 {
		fmt.Printf("frame %d: y %+g x %+g\n", f, shifts[2*f], shifts[2*f+1])
	}
	// Output:
	// frame 0: y -1 x -2
	// frame 1: y -1 x -1
	// frame 2: y -1 x +0
	// frame 3: y -1 x +1
}

// A plan for a described machine of 16 cores and two 141 GB GPUs, one GPU worker on
// each (each reserves a core).
func ExamplePlan_Planner() {
	pl, err := stemdot.Plan{Cores: 16, GPUInventory: "2x141GB", GPUs: "0,1"}.Planner()
	if err != nil {
		panic(err)
	}
	p, err := pl.Plan(nil, nil)
	if err != nil {
		panic(err)
	}
	gpu := 0
	for _, w := range p.Workers {
		if w.Kind == "gpu" {
			gpu++
		}
	}
	fmt.Println(len(p.Workers), "workers,", gpu, "on GPUs")
	// Output: 16 workers, 2 on GPUs
}
