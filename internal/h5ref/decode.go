//go:build !nohdf5

package h5ref

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// HDF5 filter ids (H5Zpublic.h).
const (
	FilterDeflate    = 1
	FilterShuffle    = 2
	FilterFletcher32 = 3
)

// Decode assembles the whole dataset from its raw chunks, undoing the filters in reverse
// order (Fletcher-32: drop the 4-byte checksum; deflate: zlib inflate; shuffle: regroup
// the elemSize byte planes) and decoding each element with order (uint8, uint16, int32 or
// float32 by elemSize and float). It returns the values in row-major order.
func (c *Chunks) Decode(elemSize int, order binary.ByteOrder, float bool) ([]float64, error) {
	total := 1
	for _, n := range c.Dims {
		total *= n
	}
	out := make([]float64, total)
	chunkLen := 1
	for _, n := range c.Chunk {
		chunkLen *= n
	}
	rank := len(c.Dims)
	first := make([]int, rank)
	var walk func(axis int) error
	walk = func(axis int) error {
		if axis < rank {
			for v := 0; v < c.Dims[axis]; v += c.Chunk[axis] {
				first[axis] = v
				if err := walk(axis + 1); err != nil {
					return err
				}
			}
			return nil
		}
		b := c.Raw[Key(first)]
		for i := len(c.Filters) - 1; i >= 0; i-- {
			switch c.Filters[i] {
			case FilterFletcher32:
				b = b[:len(b)-4]
			case FilterDeflate:
				r, err := zlib.NewReader(bytes.NewReader(b))
				if err != nil {
					return err
				}
				if b, err = io.ReadAll(r); err != nil {
					return err
				}
			case FilterShuffle:
				n := len(b) / elemSize
				u := make([]byte, len(b))
				for e := range n {
					for k := range elemSize {
						u[e*elemSize+k] = b[k*n+e]
					}
				}
				b = u
			default:
				return fmt.Errorf("h5ref: filter %d not decoded", c.Filters[i])
			}
		}
		if len(b) != chunkLen*elemSize {
			return fmt.Errorf("h5ref: chunk %v: %d bytes, want %d", first, len(b), chunkLen*elemSize)
		}
		// Copy the chunk's elements that lie inside the dataset.
		idx := make([]int, rank)
		for e := range chunkLen {
			rem, flat, inside := e, 0, true
			for a := rank - 1; a >= 0; a-- {
				idx[a] = rem % c.Chunk[a]
				rem /= c.Chunk[a]
			}
			for a := range rank {
				p := first[a] + idx[a]
				if p >= c.Dims[a] {
					inside = false
					break
				}
				flat = flat*c.Dims[a] + p
			}
			if !inside {
				continue
			}
			v := b[e*elemSize:]
			switch {
			case elemSize == 1:
				out[flat] = float64(v[0])
			case elemSize == 2:
				out[flat] = float64(order.Uint16(v))
			case elemSize == 4 && float:
				out[flat] = float64(math.Float32frombits(order.Uint32(v)))
			case elemSize == 4:
				out[flat] = float64(int32(order.Uint32(v)))
			default:
				return fmt.Errorf("h5ref: element size %d not decoded", elemSize)
			}
		}
		return nil
	}
	return out, walk(0)
}
