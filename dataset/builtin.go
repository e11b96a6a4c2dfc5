package dataset

import (
	"path/filepath"
	"strings"
)

func init() {
	Register(Format{Name: "raw", Extensions: []string{".raw", ".bin"}, Open: openRaw,
		Describe: "raw (.raw, .bin, or any file given option sig_shape and option dtype)",
		Options:  []string{"sig_shape", "dtype", "byte_order", "offset", "frame_header", "frame_footer"}})
	Register(Format{Name: "npy", Extensions: []string{".npy"}, Magic: []string{"\x93NUMPY"}, Open: openNPY})
	Register(Format{Name: "mib", Extensions: []string{".mib", ".hdr"}, Magic: []string{"MQ1,"}, Open: openMIB})
	Register(Format{Name: "blo", Extensions: []string{".blo"}, Magic: []string{"IMGBLO"}, Open: openBLO})
	Register(Format{Name: "empad", Extensions: []string{".xml"}, Open: openEMPAD,
		Describe: "empad (.xml, or the .raw file an EMPAD .xml beside it names)",
		Detect: func(path string, opt Options) bool {
			if len(opt.SigShape) > 0 || opt.DType != Invalid || !strings.EqualFold(filepath.Ext(path), ".raw") {
				return false
			}
			xmlPath, _ := empadXMLFor(path)
			return xmlPath != ""
		}})
}
