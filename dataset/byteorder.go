package dataset

import (
	"encoding/binary"
	"math/bits"

	"github.com/stemdot/stemdot/internal/npy"
)

// swapCopy copies src into dst (len(dst) >= len(src)), reversing the byte order of every
// size-byte element (size 1, 2, 4 or 8; size 1 is a plain copy). dst may be src. It works
// on 8 bytes at a time.
func swapCopy(dst, src []byte, size int) {
	if size == 1 {
		copy(dst, src)
		return
	}
	le := binary.LittleEndian
	dst = dst[:len(src)]
	i := 0
	for ; i+8 <= len(src); i += 8 {
		x := le.Uint64(src[i:])
		switch size {
		case 2:
			x = (x&0x00ff00ff00ff00ff)<<8 | (x>>8)&0x00ff00ff00ff00ff
		case 4:
			x = bits.RotateLeft64(bits.ReverseBytes64(x), 32)
		default:
			x = bits.ReverseBytes64(x)
		}
		le.PutUint64(dst[i:], x)
	}
	for ; i+size <= len(src); i += size {
		switch size {
		case 2:
			le.PutUint16(dst[i:], bits.ReverseBytes16(le.Uint16(src[i:])))
		case 4:
			le.PutUint32(dst[i:], bits.ReverseBytes32(le.Uint32(src[i:])))
		}
	}
}

// copyToHost copies src, stored with the given byte order, into dst in host byte order.
func copyToHost(dst, src []byte, size int, srcBigEndian bool) {
	if srcBigEndian != npy.HostBigEndian {
		swapCopy(dst, src, size)
	} else {
		copy(dst, src)
	}
}
