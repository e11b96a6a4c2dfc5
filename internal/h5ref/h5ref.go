//go:build !nohdf5

// Package h5ref writes HDF5 test files and reads a dataset's raw stored chunks through
// libhdf5's direct chunk API (H5Dread_chunk), so that tests can decode them on their own
// (inflate, unshuffle, Fletcher-32, byte order) as a reference for package dataset's
// reader, which goes through the library's filter pipeline and type conversion instead.
package h5ref

/*
#cgo pkg-config: hdf5
#include <stdlib.h>
#include <hdf5.h>

static hid_t sd_ftype(int code) {
	switch (code) {
	case 0: return H5T_STD_U8LE;
	case 1: return H5T_STD_U16LE;
	case 2: return H5T_STD_U16BE;
	case 3: return H5T_IEEE_F32LE;
	case 4: return H5T_IEEE_F32BE;
	case 5: return H5T_STD_I32BE;
	case 6: return H5T_STD_I64LE;
	}
	return -1;
}
static hid_t sd_mtype(int code) {
	switch (code) {
	case 0: return H5T_NATIVE_UINT8;
	case 1: case 2: return H5T_NATIVE_UINT16;
	case 3: case 4: return H5T_NATIVE_FLOAT;
	case 5: return H5T_NATIVE_INT32;
	case 6: return H5T_NATIVE_INT64;
	}
	return -1;
}
static hid_t sd_dcpl(void) { return H5Pcreate(H5P_DATASET_CREATE); }
static hid_t sd_lcpl(void) { hid_t p = H5Pcreate(H5P_LINK_CREATE); H5Pset_create_intermediate_group(p, 1); return p; }
static hsize_t sd_unlimited(void) { return H5S_UNLIMITED; }
static hid_t sd_native_double(void) { return H5T_NATIVE_DOUBLE; }

// sd_pass is a filter that stores chunks as they are.
static size_t sd_pass(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes, size_t *buf_size, void **buf) {
	return nbytes;
}

// sd_register registers sd_pass as filter id, named name (which must outlive the
// registration: the library keeps the pointer).
static herr_t sd_register(int id, const char *name) {
	H5Z_class2_t c = {H5Z_CLASS_T_VERS, (H5Z_filter_t)id, 1, 1, name, NULL, NULL, sd_pass};
	return H5Zregister(&c);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Type is the stored type of a written dataset.
type Type int

// The stored types Write writes; data is given in host order of the matching Go type.
const (
	U8LE Type = iota
	U16LE
	U16BE
	F32LE
	F32BE
	I32BE
	I64LE
)

// Dataset describes one dataset to Write.
type Dataset struct {
	Path    string // e.g. "/entry/data"
	Dims    []int
	Chunk   []int // nil: contiguous
	Gzip    int   // deflate level (0: none; needs Chunk)
	Shuffle bool
	Fletch  bool
	// Filter, when its ID is not 0, is a filter this process does not have (e.g. 32015,
	// "zstd"): Write registers a pass-through filter of that id and name, stores the
	// dataset through it (needs Chunk) and unregisters it, so that the file names a filter
	// the library cannot apply when it is read.
	Filter Filter
	Type   Type
	// Data holds the host-order values, product(Dims) of them; nil: nothing is written
	// (a contiguous dataset's space is never allocated, a chunked one has no chunks).
	Data unsafe.Pointer
	// Written, when positive, writes only indices [0, Written) of the first axis (the
	// first values of Data): the chunks after them are never written.
	Written int
	// MaxDims are the maximum dimensions (nil: Dims; -1: unlimited, needs Chunk or Virtual).
	MaxDims []int
	// Fill, when not nil, is the fill value, read where nothing was written.
	Fill *float64
	// External stores the contiguous dataset's values in these files, in order (HDF5
	// external storage, H5Pset_external); Data must be nil: the caller writes the files.
	External []External
	// Virtual makes the dataset a virtual dataset (VDS) of these mappings; Data must be nil.
	Virtual []Mapping
	// Chunks, when not nil, are the stored (already filtered) bytes of the dataset's
	// chunks in C order of the chunk grid, written as they are with H5Dwrite_chunk (e.g.
	// bitshuffle-LZ4 blobs under Filter 32008); needs Chunk, and Data must be nil.
	Chunks [][]byte
}

// External is one file of external storage: Size bytes (-1: unlimited) from Offset.
type External struct {
	Name         string
	Offset, Size int64
}

// Hyperslab is a regular hyperslab selection (H5Sselect_hyperslab): Stride and Block nil
// mean 1 on every axis; a Count or Block of -1 is unlimited (H5S_UNLIMITED).
type Hyperslab struct {
	Start, Stride, Count, Block []int
}

// Mapping maps a source dataset to a region of a virtual dataset (H5Pset_virtual).
type Mapping struct {
	// File is the source file's name as stored: relative, absolute, "." (the virtual
	// dataset's own file) or with "%b" (a printf-style mapping, one file per block).
	File, Dataset string
	// Virtual is the region of the virtual dataset.
	Virtual Hyperslab
	// SourceDims and SourceMax (nil: SourceDims; -1: unlimited) are the source's
	// dataspace; Source its region (nil: all of it).
	SourceDims, SourceMax []int
	Source                *Hyperslab
}

// Filter is an HDF5 filter id (https://portal.hdfgroup.org/documentation/hdf5-docs/registered_filter_plugins.html),
// name and client data values (cd_values, stored with the dataset as they are).
type Filter struct {
	ID     int
	Name   string
	Values []uint32
}

// Write creates the HDF5 file path with the datasets sets.
func Write(path string, sets ...Dataset) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	f := C.H5Fcreate(cpath, C.H5F_ACC_TRUNC, C.H5P_DEFAULT, C.H5P_DEFAULT)
	if f < 0 {
		return fmt.Errorf("h5ref: creating %s", path)
	}
	defer C.H5Fclose(f)
	for _, s := range sets {
		dims := make([]C.hsize_t, len(s.Dims))
		for i, n := range s.Dims {
			dims[i] = C.hsize_t(n)
		}
		space := C.H5Screate_simple(C.int(len(dims)), &dims[0], maxDims(s.MaxDims))
		dcpl := C.sd_dcpl()
		if s.Fill != nil {
			C.H5Pset_fill_value(dcpl, C.sd_native_double(), unsafe.Pointer(s.Fill))
		}
		for _, e := range s.External {
			name := C.CString(e.Name)
			size := C.hsize_t(e.Size)
			if e.Size < 0 {
				size = C.sd_unlimited()
			}
			err := C.H5Pset_external(dcpl, name, C.off_t(e.Offset), size)
			C.free(unsafe.Pointer(name))
			if err < 0 {
				return fmt.Errorf("h5ref: external file %s", e.Name)
			}
		}
		for _, m := range s.Virtual {
			if err := setVirtual(dcpl, space, m); err != nil {
				return err
			}
		}
		if s.Chunk != nil {
			chunk := make([]C.hsize_t, len(s.Chunk))
			for i, n := range s.Chunk {
				chunk[i] = C.hsize_t(n)
			}
			C.H5Pset_chunk(dcpl, C.int(len(chunk)), &chunk[0])
			if s.Shuffle {
				C.H5Pset_shuffle(dcpl)
			}
			if s.Gzip > 0 {
				C.H5Pset_deflate(dcpl, C.uint(s.Gzip))
			}
			if s.Fletch {
				C.H5Pset_fletcher32(dcpl)
			}
			if s.Filter.ID != 0 {
				name := C.CString(s.Filter.Name)
				defer C.free(unsafe.Pointer(name))
				id := C.H5Z_filter_t(s.Filter.ID)
				values := make([]C.uint, len(s.Filter.Values)+1) // never empty: &values[0]
				for i, v := range s.Filter.Values {
					values[i] = C.uint(v)
				}
				if C.sd_register(C.int(s.Filter.ID), name) < 0 ||
					C.H5Pset_filter(dcpl, id, C.H5Z_FLAG_MANDATORY, C.size_t(len(s.Filter.Values)), &values[0]) < 0 {
					return fmt.Errorf("h5ref: registering filter %d", s.Filter.ID)
				}
				defer C.H5Zunregister(id)
			}
		}
		lcpl := C.sd_lcpl()
		name := C.CString(s.Path)
		set := C.H5Dcreate2(f, name, C.sd_ftype(C.int(s.Type)), space, lcpl, dcpl, C.H5P_DEFAULT)
		C.free(unsafe.Pointer(name))
		C.H5Pclose(lcpl)
		C.H5Pclose(dcpl)
		C.H5Sclose(space)
		if set < 0 {
			return fmt.Errorf("h5ref: creating dataset %s", s.Path)
		}
		err := write(set, s)
		if err == nil && s.Chunks != nil {
			err = writeChunks(set, s)
		}
		C.H5Dclose(set)
		if err != nil {
			return err
		}
	}
	return nil
}

// write writes s.Data, or its first s.Written indices along the first axis, into set.
func write(set C.hid_t, s Dataset) error {
	if s.Data == nil {
		return nil
	}
	mem, file := C.hid_t(C.H5S_ALL), C.hid_t(C.H5S_ALL)
	if s.Written > 0 {
		start := make([]C.hsize_t, len(s.Dims))
		count := make([]C.hsize_t, len(s.Dims))
		for i, n := range s.Dims {
			count[i] = C.hsize_t(n)
		}
		count[0] = C.hsize_t(s.Written)
		file = C.H5Dget_space(set)
		defer C.H5Sclose(file)
		C.H5Sselect_hyperslab(file, C.H5S_SELECT_SET, &start[0], nil, &count[0], nil)
		mem = C.H5Screate_simple(C.int(len(count)), &count[0], nil)
		defer C.H5Sclose(mem)
	}
	if C.H5Dwrite(set, C.sd_mtype(C.int(s.Type)), mem, file, C.H5P_DEFAULT, s.Data) < 0 {
		return fmt.Errorf("h5ref: writing dataset %s", s.Path)
	}
	return nil
}

// writeChunks writes s.Chunks, in C order of the chunk grid, with H5Dwrite_chunk.
func writeChunks(set C.hid_t, s Dataset) error {
	offset := make([]C.hsize_t, len(s.Dims))
	for _, chunk := range s.Chunks {
		if len(chunk) == 0 || offset[0] >= C.hsize_t(s.Dims[0]) {
			return fmt.Errorf("h5ref: dataset %s: an empty chunk, or more chunks than the grid holds", s.Path)
		}
		if C.H5Dwrite_chunk(set, C.H5P_DEFAULT, 0, &offset[0], C.size_t(len(chunk)), unsafe.Pointer(&chunk[0])) < 0 {
			return fmt.Errorf("h5ref: writing a chunk of dataset %s at %v", s.Path, offset)
		}
		for i := len(offset) - 1; i >= 0; i-- { // the next chunk's offset, last axis fastest
			offset[i] += C.hsize_t(s.Chunk[i])
			if i == 0 || offset[i] < C.hsize_t(s.Dims[i]) {
				break
			}
			offset[i] = 0
		}
	}
	return nil
}

// maxDims converts maximum dimensions (-1: unlimited) for H5Screate_simple (nil: none).
func maxDims(dims []int) *C.hsize_t {
	if dims == nil {
		return nil
	}
	out := make([]C.hsize_t, len(dims))
	for i, n := range dims {
		out[i] = C.hsize_t(n)
		if n < 0 {
			out[i] = C.sd_unlimited()
		}
	}
	return &out[0]
}

// hsizes converts a hyperslab's sizes (nil: 1 on every axis; -1: unlimited).
func hsizes(v []int, rank int) []C.hsize_t {
	out := make([]C.hsize_t, rank)
	for i := range out {
		switch {
		case v == nil:
			out[i] = 1
		case v[i] < 0:
			out[i] = C.sd_unlimited()
		default:
			out[i] = C.hsize_t(v[i])
		}
	}
	return out
}

// selectSlab selects h in space.
func selectSlab(space C.hid_t, h Hyperslab) C.herr_t {
	rank := len(h.Start)
	start, stride, count, block := hsizes(h.Start, rank), hsizes(h.Stride, rank), hsizes(h.Count, rank), hsizes(h.Block, rank)
	return C.H5Sselect_hyperslab(space, C.H5S_SELECT_SET, &start[0], &stride[0], &count[0], &block[0])
}

// setVirtual adds mapping m to the creation properties dcpl of a virtual dataset of
// dataspace space.
func setVirtual(dcpl, space C.hid_t, m Mapping) error {
	vspace := C.H5Scopy(space)
	defer C.H5Sclose(vspace)
	sdims := hsizes(m.SourceDims, len(m.SourceDims))
	smax := m.SourceMax
	if smax == nil {
		smax = m.SourceDims
	}
	sspace := C.H5Screate_simple(C.int(len(sdims)), &sdims[0], maxDims(smax))
	defer C.H5Sclose(sspace)
	if selectSlab(vspace, m.Virtual) < 0 || (m.Source != nil && selectSlab(sspace, *m.Source) < 0) {
		return fmt.Errorf("h5ref: mapping of %s:%s: selection", m.File, m.Dataset)
	}
	file, set := C.CString(m.File), C.CString(m.Dataset)
	defer C.free(unsafe.Pointer(file))
	defer C.free(unsafe.Pointer(set))
	if C.H5Pset_virtual(dcpl, vspace, file, set, sspace) < 0 {
		return fmt.Errorf("h5ref: mapping of %s:%s", m.File, m.Dataset)
	}
	return nil
}

// ExternalLink adds to the existing file path a link at link (groups created as needed)
// to object in file (an HDF5 external link, H5Lcreate_external).
func ExternalLink(path, link, file, object string) error {
	cfile, cobj := C.CString(file), C.CString(object)
	defer C.free(unsafe.Pointer(cfile))
	defer C.free(unsafe.Pointer(cobj))
	return addLink(path, link, func(f C.hid_t, clink *C.char, lcpl C.hid_t) C.herr_t {
		return C.H5Lcreate_external(cfile, cobj, f, clink, lcpl, C.H5P_DEFAULT)
	})
}

// SoftLink adds to the existing file path a soft link at link (groups created as needed)
// to the path target, which need not exist (H5Lcreate_soft).
func SoftLink(path, link, target string) error {
	ctarget := C.CString(target)
	defer C.free(unsafe.Pointer(ctarget))
	return addLink(path, link, func(f C.hid_t, clink *C.char, lcpl C.hid_t) C.herr_t {
		return C.H5Lcreate_soft(ctarget, f, clink, lcpl, C.H5P_DEFAULT)
	})
}

// addLink opens the file path for writing and creates the link at link with create.
func addLink(path, link string, create func(f C.hid_t, clink *C.char, lcpl C.hid_t) C.herr_t) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	f := C.H5Fopen(cpath, C.H5F_ACC_RDWR, C.H5P_DEFAULT)
	if f < 0 {
		return fmt.Errorf("h5ref: opening %s", path)
	}
	defer C.H5Fclose(f)
	clink := C.CString(link)
	defer C.free(unsafe.Pointer(clink))
	lcpl := C.sd_lcpl()
	defer C.H5Pclose(lcpl)
	if create(f, clink, lcpl) < 0 {
		return fmt.Errorf("h5ref: link %s", link)
	}
	return nil
}

// Chunks is a dataset's stored form: its chunk shape, filter pipeline (HDF5 filter ids in
// the order they were applied on writing) and the raw bytes of every chunk, keyed by the
// chunk's first index per axis.
type Chunks struct {
	Dims, Chunk []int
	Filters     []int
	Raw         map[string][]byte
}

// Key formats a chunk's first index per axis as a Raw key.
func Key(first []int) string { return fmt.Sprint(first) }

// ReadChunks reads the raw chunks of the chunked dataset dsPath with H5Dread_chunk.
func ReadChunks(path, dsPath string) (*Chunks, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	f := C.H5Fopen(cpath, C.H5F_ACC_RDONLY, C.H5P_DEFAULT)
	if f < 0 {
		return nil, fmt.Errorf("h5ref: opening %s", path)
	}
	defer C.H5Fclose(f)
	name := C.CString(dsPath)
	defer C.free(unsafe.Pointer(name))
	set := C.H5Dopen2(f, name, C.H5P_DEFAULT)
	if set < 0 {
		return nil, fmt.Errorf("h5ref: opening %s", dsPath)
	}
	defer C.H5Dclose(set)
	space := C.H5Dget_space(set)
	defer C.H5Sclose(space)
	rank := int(C.H5Sget_simple_extent_ndims(space))
	dims := make([]C.hsize_t, rank)
	C.H5Sget_simple_extent_dims(space, &dims[0], nil)
	dcpl := C.H5Dget_create_plist(set)
	defer C.H5Pclose(dcpl)
	chunk := make([]C.hsize_t, rank)
	if C.H5Pget_chunk(dcpl, C.int(rank), &chunk[0]) != C.int(rank) {
		return nil, fmt.Errorf("h5ref: %s is not chunked", dsPath)
	}
	c := &Chunks{Raw: map[string][]byte{}}
	for i := range rank {
		c.Dims = append(c.Dims, int(dims[i]))
		c.Chunk = append(c.Chunk, int(chunk[i]))
	}
	for i := range int(C.H5Pget_nfilters(dcpl)) {
		var flags C.uint
		var nelmts C.size_t
		var cfg C.uint
		c.Filters = append(c.Filters, int(C.H5Pget_filter2(dcpl, C.uint(i), &flags, &nelmts, nil, 0, nil, &cfg)))
	}
	first := make([]int, rank)
	var walk func(axis int) error
	walk = func(axis int) error {
		if axis == rank {
			off := make([]C.hsize_t, rank)
			for i, v := range first {
				off[i] = C.hsize_t(v)
			}
			var size C.hsize_t
			if C.H5Dget_chunk_storage_size(set, &off[0], &size) < 0 {
				return fmt.Errorf("h5ref: chunk %v: size", first)
			}
			buf := make([]byte, int(size))
			var mask C.uint32_t
			if size > 0 && C.H5Dread_chunk(set, C.H5P_DEFAULT, &off[0], &mask, unsafe.Pointer(&buf[0])) < 0 {
				return fmt.Errorf("h5ref: chunk %v: read", first)
			}
			if mask != 0 {
				return fmt.Errorf("h5ref: chunk %v: filter mask %#x (skipped filters)", first, uint32(mask))
			}
			c.Raw[Key(first)] = buf
			return nil
		}
		for v := 0; v < c.Dims[axis]; v += c.Chunk[axis] {
			first[axis] = v
			if err := walk(axis + 1); err != nil {
				return err
			}
		}
		return nil
	}
	return c, walk(0)
}

// DECTRIS writes a DECTRIS-style acquisition (dataset/hdf5's format dectris) of n frames
// of sy×sx uint16 pixels, frames in C order, into dir: stem_data_000001.h5 holding them
// at /entry/data/data, one frame a chunk, deflated, and stem_master.h5 linking that
// dataset as /entry/data/data_000001, with nimages n, ntrigger 1 and pixelMask (sy×sx,
// non-zero: flagged; nil: no pixel_mask) in /entry/instrument/detector/detectorSpecific.
// It returns the master's path.
func DECTRIS(dir, stem string, frames []uint16, n, sy, sx int, pixelMask []uint8) (string, error) {
	data := stem + "_data_000001.h5"
	if err := Write(dir+"/"+data, Dataset{Path: "/entry/data/data", Dims: []int{n, sy, sx}, Chunk: []int{1, sy, sx}, Gzip: 1,
		Type: U16LE, Data: unsafe.Pointer(&frames[0])}); err != nil {
		return "", err
	}
	const specific = "/entry/instrument/detector/detectorSpecific/"
	nimages, ntrigger := int64(n), int64(1)
	sets := []Dataset{{Path: specific + "nimages", Dims: []int{1}, Type: I64LE, Data: unsafe.Pointer(&nimages)},
		{Path: specific + "ntrigger", Dims: []int{1}, Type: I64LE, Data: unsafe.Pointer(&ntrigger)}}
	if pixelMask != nil {
		sets = append(sets, Dataset{Path: specific + "pixel_mask", Dims: []int{sy, sx}, Type: U8LE, Data: unsafe.Pointer(&pixelMask[0])})
	}
	master := dir + "/" + stem + "_master.h5"
	if err := Write(master, sets...); err != nil {
		return "", err
	}
	return master, ExternalLink(master, "/entry/data/data_000001", data, "/entry/data/data")
}
