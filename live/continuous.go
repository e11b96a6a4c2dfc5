package live

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Continuous is the receiver of a continuous run: the acquisitions of the receiver it
// wraps, cut into scans of n frames, one acquisition of its own each (Continue moves on
// to the next scan).
//
// An acquisition of n frames is one scan, its frames as they come. One of an unknown
// number of frames (Header.Frames 0: an unbounded stream, such as a Merlin acquisition
// without a frame count or LiberTEM-live's Merlin simulator with --continuous) or of
// more than n (a DECTRIS series of a very large nimages·ntrigger, as LiberTEM-live
// issue #40 emulates continuous acquisition on DECTRIS detectors) is cut into
// consecutive blocks of n frames: frame i of the acquisition is frame i mod n of scan
// i / n. A block ends when its n frames came, or when a frame of a later block comes
// (the frames still missing are missing: a frame that comes after a later block's is
// released unseen), or when the acquisition ends (a last block of fewer than n frames
// ends early). After the acquisition's last block, Continue moves on to the wrapped
// receiver's next acquisition (Continuer; for a receiver that is not one, the stream
// ends there: io.EOF), cut in the same way.
type Continuous struct {
	rcv  Receiver
	n    int
	h    Header  // the wrapped receiver's acquisition
	cut  bool    // h's frames are cut into blocks of n
	blk  int     // the current block
	held []Frame // frames from rcv not given yet, in arrival order: a later block's, and late ones after it
	over bool    // a frame of a later block came: the current block is over
	end  error   // the end of rcv's acquisition (io.EOF or an error wrapping ErrEnded), once met
}

var _ interface {
	Receiver
	Continuer
} = (*Continuous)(nil)

// NewContinuous returns the receiver of scans of n frames (n > 0) from rcv, whose
// Start returned h.
func NewContinuous(rcv Receiver, h Header, n int) *Continuous {
	c := &Continuous{rcv: rcv, n: max(n, 1)}
	c.set(h)
	return c
}

// set takes h as the wrapped receiver's acquisition, from its first block.
func (c *Continuous) set(h Header) {
	c.h, c.blk, c.held, c.over, c.end = h, 0, c.held[:0], false, nil
	c.cut = h.Frames == 0 || h.Frames > c.n
}

// Start returns the header of the current scan: the wrapped receiver's acquisition's,
// with Frames n where its frames are cut into scans, and a note saying so.
func (c *Continuous) Start(context.Context) (Header, error) {
	h := c.h
	if !c.cut {
		return h, nil
	}
	h.Frames = c.n
	h.Notes = append(h.Notes[:len(h.Notes):len(h.Notes)], c.cutNote())
	return h, nil
}

// cutNote says how the acquisition's frames are cut into scans.
func (c *Continuous) cutNote() string {
	if c.h.Frames == 0 {
		return fmt.Sprintf("the acquisition announces no frame count: its frames are cut into scans of %d (frame i is position i mod %d of scan i / %d)", c.n, c.n, c.n)
	}
	s := fmt.Sprintf("the acquisition's %d frames are cut into scans of %d", c.h.Frames, c.n)
	if r := c.h.Frames % c.n; r != 0 {
		s += fmt.Sprintf(" (its last %d make a scan that ends early)", r)
	}
	return s
}

// Next gives the current scan's frames, indices from 0, as live.Receiver's Next.
func (c *Continuous) Next(ctx context.Context, dst []Frame) ([]Frame, error) {
	if !c.cut {
		return c.rcv.Next(ctx, dst)
	}
	n0 := len(dst)
	for {
		dst = c.take(dst)
		switch {
		case len(dst) > n0:
			return dst, nil
		case c.over:
			return dst, io.EOF
		case c.end != nil:
			return dst, c.end
		}
		var err error
		c.held, err = c.rcv.Next(ctx, c.held)
		if errors.Is(err, io.EOF) || errors.Is(err, ErrEnded) {
			c.end = err
		} else if err != nil {
			return dst, err
		}
	}
}

// take moves the held frames of the current block into dst until one of a later block,
// and releases those of earlier blocks.
func (c *Continuous) take(dst []Frame) []Frame {
	k := 0
	for ; k < len(c.held); k++ {
		f := c.held[k]
		b := f.Index / c.n
		if f.Index >= 0 && b > c.blk {
			c.over = true
			break
		}
		if f.Index < 0 || b < c.blk {
			c.rcv.Release(f)
			continue
		}
		f.Index -= b * c.n
		dst = append(dst, f)
	}
	c.held = c.held[:copy(c.held, c.held[k:])]
	return dst
}

// Continue moves on to the next scan: the next block of frames, or the first of the
// wrapped receiver's next acquisition (Continuer.Continue), and returns its header. The
// current scan's frames not given yet are released.
func (c *Continuous) Continue(ctx context.Context) (Header, error) {
	if c.cut {
		c.over = false
		k := 0
		for _, f := range c.held {
			if f.Index < 0 || f.Index/c.n <= c.blk {
				c.rcv.Release(f)
			} else {
				c.held[k] = f
				k++
			}
		}
		c.held = c.held[:k]
		switch {
		case len(c.held) > 0:
			c.blk = c.held[0].Index / c.n
			return c.Start(ctx)
		case c.end == nil && (c.h.Frames == 0 || (c.blk+1)*c.n < c.h.Frames):
			c.blk++
			return c.Start(ctx)
		}
	}
	cr, ok := c.rcv.(Continuer)
	if !ok {
		return Header{}, io.EOF
	}
	h, err := cr.Continue(ctx)
	if err != nil {
		return Header{}, err
	}
	c.set(h)
	return c.Start(ctx)
}

// Decode decodes f as the wrapped receiver does.
func (c *Continuous) Decode(dst []byte, f Frame) error { return c.rcv.Decode(dst, f) }

// Release hands f back to the wrapped receiver.
func (c *Continuous) Release(f Frame) { c.rcv.Release(f) }

// Stats returns the wrapped receiver's counts, over all its acquisitions.
func (c *Continuous) Stats() Stats { return c.rcv.Stats() }

// Close closes the wrapped receiver.
func (c *Continuous) Close() error { return c.rcv.Close() }
