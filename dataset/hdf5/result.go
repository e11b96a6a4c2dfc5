package hdf5

// The result written as HDF5 (ResultImage; writer.go, none.go in a build without
// libhdf5).

// ResultAxis is an axis of a result written as HDF5: a HyperSpy axis (RosettaSciIO's
// HSPY format: group axis-<i> with attributes name, scale, offset, units, size,
// navigate).
type ResultAxis struct {
	Name          string
	Scale, Offset float64 // Scale 0: 1 (uncalibrated)
	Units         string  // "": none
	Navigate      bool
}

// ResultFile is a result to write as HDF5 in HyperSpy's HSPY layout (ResultImage).
type ResultFile struct {
	// Title names the experiment: the group /Experiments/<Title> and its
	// metadata/General title.
	Title string
	// Shape is the data's shape, numpy order, and F32 or F64 its values in C order.
	Shape []int
	F32   []float32
	F64   []float64
	// Axes describe the data's axes, one per axis of Shape, in order.
	Axes []ResultAxis
	// DataAttrs are string-array attributes of the data set (in key order).
	DataAttrs []StringsAttr
	// Provenance are string attributes of the experiment's original_metadata group, in
	// order.
	Provenance []StringsAttr
}

// StringsAttr is an attribute of strings: one value is written as a scalar string,
// else an array (Array forces an array of any length).
type StringsAttr struct {
	Name   string
	Values []string
	Array  bool
}
