// Package hdf5 reads 4D-STEM frames from HDF5 files for package dataset: importing it
// registers the format "hdf5" (extensions .h5, .hdf5, .hdf, .nxs, .emd, or the HDF5
// signature "\x89HDF\r\n\x1a\n"), which dataset.Open then reads with the shared options
// nav_shape, sync_offset, flyback, roi, frames, dataset_path and allow_fill and the format
// option frame_axis (frames-last image stacks, layout.go); and the
// format "dectris", DECTRIS ARINA/QUADRO/EIGER master files whose linked blocks of
// frames are read as one scan (dectris.go; format option pixel_mask).
//
// HDF5 files are read through the HDF5 C library (libhdf5, https://www.hdfgroup.org/;
// Debian: libhdf5-dev), so that every storage layout and filter the library supports
// (contiguous, chunked, deflate, shuffle, Fletcher-32, ...) is read as written. With the
// library's file locking (on unless HDF5_USE_FILE_LOCKING=FALSE), a file that another
// process holds open for writing cannot be opened: that is an errs.IO error "locked by
// another process" naming HDF5_USE_FILE_LOCKING (h5OpenError), not a format error. A build
// with the tag nohdf5 leaves the library out and refuses HDF5 files. The chunks of
// datasets whose filters are all deflate, shuffle, Fletcher-32, LZF (32000, h5py's
// compression="lzf"), LZ4 (32004) or bitshuffle (32008, with LZ4 or none) are located
// by the dataset's chunk index, read from the file once at open (package
// internal/h5index; through libhdf5, under its global lock, where it is not read), then
// read and decoded in Go by the worker that reads them (chunks.go, package
// internal/h5filter), outside the lock, so that compressed
// files are decoded on as many cores as there are workers, without plugins; the
// checksums the filters carry (zlib's Adler-32, Fletcher-32) are checked, and a chunk
// that fails one, or decodes to more than its size, is a format error naming the chunk
// and its frames.
// Other filters (Blosc, zstd, ...) are loaded by the library as plugins from
// HDF5_PLUGIN_PATH; a dataset whose filter cannot be loaded is refused when opened, not
// when read.
//
// The frames are a dataset of rank 3 (n, sig_y, sig_x), 4 (nav_y, nav_x, sig_y, sig_x)
// or 5 (e.g. fpd files: (nav_y, nav_x, 1, sig_y, sig_x), or a time series (t, nav_y,
// nav_x, sig_y, sig_x)): option dataset_path, or the largest readable dataset of rank
// 4, else 5, else 3 (dataset.Options.DatasetPath).
// The nav shape is the axes before the last two as stored, size-1 axes kept, as
// LiberTEM reads them (dataset.NavFromAxes): rank 3 has nav shape (n,), as for NPY
// files, an fpd file's (nav_y, nav_x, 1), a time series (t, nav_y, nav_x). A dataset of
// rank 6 or more that option dataset_path names is read when option nav_shape gives its
// frames at most 3 nav axes (dataset.MaxNavDims).
// Integer (8, 16, 32 bits) and float (32, 64 bits) data of either byte order is read;
// the library converts it to host order. Frames are read tile by tile through the
// library (hyperslabs of whole frames), its chunk cache sized to a band of chunks.
package hdf5

import "github.com/stemdot/stemdot/dataset"

func init() {
	dataset.Register(dataset.Format{Name: "hdf5", Extensions: []string{".h5", ".hdf5", ".hdf", ".nxs", ".emd"}, Magic: []string{"\x89HDF\r\n\x1a\n"},
		Describe: "hdf5 (HDF5: .h5, .hdf5, .hdf, .nxs, .emd)", Open: openHDF5, Options: []string{"dataset_path", "allow_fill"},
		FormatOptions: []dataset.FormatOption{{Key: "frame_axis", Default: "auto",
			Usage: "HDF5: the axis of the frames of a dataset of rank 3: first (n, sig_y, sig_x), last (sig_y, sig_x, n: an image stack stored frames-last, as FEI Velox .emd writes it) or auto (last where the file says so: Velox's /Data/Image/<uuid>/Data, Berkeley EMD axis names, HDF5 dimension labels; else first)"}}})
}
