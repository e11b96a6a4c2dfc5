// Package formats imports every format package; import it for its side effect:
//
//	import _ "github.com/stemdot/stemdot/dataset/formats"
//
// makes dataset.Open read every format stemdot supports (each package registers its
// format in its init function, as the image/png import registers PNG with package
// image). The stemdot package, the CLI and the C ABI import it; a program that reads only
// some formats imports their packages instead.
package formats

import (
	_ "github.com/stemdot/stemdot/dataset/blo"
	_ "github.com/stemdot/stemdot/dataset/csr"
	_ "github.com/stemdot/stemdot/dataset/dm"
	_ "github.com/stemdot/stemdot/dataset/empad"
	_ "github.com/stemdot/stemdot/dataset/frms6"
	_ "github.com/stemdot/stemdot/dataset/hdf5"
	_ "github.com/stemdot/stemdot/dataset/k2is"
	_ "github.com/stemdot/stemdot/dataset/mib"
	_ "github.com/stemdot/stemdot/dataset/mrc"
	_ "github.com/stemdot/stemdot/dataset/npy"
	_ "github.com/stemdot/stemdot/dataset/raw"
	_ "github.com/stemdot/stemdot/dataset/seq"
	_ "github.com/stemdot/stemdot/dataset/ser"
	_ "github.com/stemdot/stemdot/dataset/stempy"
	_ "github.com/stemdot/stemdot/dataset/tvips"
)
