// Package masks builds and validates mask stacks: the virtual detectors applied to every
// frame of a 4D-STEM scan.
//
// A Stack has shape (n_masks, sig_y, sig_x), float32, C order. Applying it to a frame f
// (shape sig_y × sig_x) gives n_masks numbers, out[m] = Σ_{y,x} mask[m,y,x]·f[y,x], as
// LiberTEM's ApplyMasksUDF does.
package masks

// Stack is a stack of masks of shape (N, SigY, SigX), float32, C order.
type Stack struct {
	// N is the number of masks.
	N int
	// SigY, SigX is the signal shape the masks apply to, in pixels.
	SigY, SigX int
	// Data holds N*SigY*SigX weights; mask m, pixel (y, x) is Data[(m*SigY+y)*SigX+x].
	Data []float32
	// Names label each mask ("disk", "ring", "com_sum", ...); len(Names) == N.
	Names []string
}

// Pixels is SigY*SigX, the length of one mask.
func (s *Stack) Pixels() int { return s.SigY * s.SigX }

// Mask returns mask m as a slice of Pixels() weights (not a copy).
func (s *Stack) Mask(m int) []float32 { return s.Data[m*s.Pixels() : (m+1)*s.Pixels()] }
