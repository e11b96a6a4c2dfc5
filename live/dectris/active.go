package dectris

import (
	"context"
	"time"

	"github.com/stemdot/stemdot/errs"
)

// configure sets the stream's mode (enabled) and format, and the detector's nimages,
// ntrigger and trigger_mode where Options give them, then reads them back: a parameter
// already at the value wanted is not set (LiberTEM-live's simulator refuses to set
// most), nor the format where the API does not tell it.
func (r *Receiver) configure(ctx context.Context) error {
	format := "legacy"
	if r.opt.Protocol == V2 {
		format = "cbor"
	}
	set := func(module, param string, want any) error {
		var have any
		if err := r.client.Config(ctx, module, param, &have); err == nil && have == want {
			return nil
		}
		return r.client.SetConfig(ctx, module, param, want)
	}
	if err := set("stream", "mode", "enabled"); err != nil {
		return err
	}
	var have string // LiberTEM-live's simulator knows no format (it sends v1): left as it is
	if r.client.Config(ctx, "stream", "format", &have) == nil && have != format {
		if err := r.client.SetConfig(ctx, "stream", "format", format); err != nil {
			return err
		}
	}
	if r.opt.TriggerMode != "" {
		if err := set("detector", "trigger_mode", r.opt.TriggerMode); err != nil {
			return err
		}
	}
	for _, p := range []struct {
		name string
		n    int
	}{{"nimages", r.opt.NImages}, {"ntrigger", r.opt.NTrigger}} {
		if p.n > 0 {
			if err := set("detector", p.name, float64(p.n)); err != nil {
				return err
			}
		}
	}
	var nimages, ntrigger uint64
	if r.client.Config(ctx, "detector", "nimages", &nimages) == nil &&
		r.client.Config(ctx, "detector", "ntrigger", &ntrigger) == nil &&
		r.client.Config(ctx, "detector", "trigger_mode", &r.mode) == nil {
		n, ok := imagesAsked(nimages, ntrigger, r.mode)
		if !ok {
			return errs.New(errs.Argument, "dectris: the detector's nimages %d × ntrigger %d is more than 2^64 images", nimages, ntrigger)
		}
		r.asked = n
	}
	return nil
}

// trigger sends the triggers of the internal trigger modes in the background: ntrigger
// of them (each returns when its images are taken); a trigger refused ends the series.
func (r *Receiver) trigger() {
	if r.mode != "ints" && r.mode != "inte" {
		return
	}
	n := max(r.opt.NTrigger, 1)
	var ctx context.Context
	ctx, r.trigStop = context.WithCancel(context.Background())
	go func() {
		for i := 0; i < n && ctx.Err() == nil; i++ {
			if _, err := r.client.Command(ctx, "trigger"); err != nil && ctx.Err() == nil {
				select {
				case r.msgs <- message{err: err}:
				case <-r.quit:
				}
				return
			}
		}
	}()
}

// disarm stops the triggers and disarms the detector (active mode, once).
func (r *Receiver) disarm() {
	if !r.armed {
		return
	}
	r.armed = false
	if r.trigStop != nil {
		r.trigStop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.client.Command(ctx, "disarm")
}
