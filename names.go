package stemdot

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/frontend"
)

// goNames are the Go names of the options, by key: the key is the option's name in
// messages ("option dataset_path"), in the C ABI's and Python's options, and, as
// frontend.FlagName, the CLI's flag; the Go name is the field (or argument) a Go caller sets.
// Every shared option of OpenOptions and planKeys, the outputs and the masks is here
// (the tests check it against the fields); a format option's Go name is
// Options.FormatOptions["key"] (goName).
var goNames = map[string]string{
	"format":       "Options.Format",
	"nav_shape":    "Options.NavShape",
	"sig_shape":    "Options.SigShape",
	"dtype":        "Options.DType",
	"byte_order":   "Options.BigEndian",
	"offset":       "Options.Offset",
	"frame_header": "Options.FrameHeader",
	"frame_footer": "Options.FrameFooter",
	"sync_offset":  "Options.SyncOffset",
	"dataset_path": "Options.DatasetPath",
	"frames":       "Options.Frames",
	"roi":          "Options.ROI",
	"flyback":      "Options.Flyback",
	"allow_fill":   "Options.AllowFill",

	"cpus":                "Plan.CPUs",
	"gpus":                "Plan.GPUs",
	"ram_per_gpu_worker":  "Plan.RAMPerGPUWorker",
	"max_workers_per_gpu": "Plan.MaxWorkersPerGPU",
	"oversubscribe":       "Plan.Oversubscribe",
	"partition_size":      "Plan.PartitionSize",
	"topology":            "Plan.Cores",
	"gpu_inventory":       "Plan.GPUInventory",

	"out":        "Outputs.NPY",
	"png":        "Outputs.PNGPrefix",
	"com_shifts": "Outputs.COMShifts",
	"mean":       "Outputs.Mean",
	"max":        "Outputs.Max",
	"std":        "Outputs.Std",
	"at":         "Pick's positions",

	"field":       "COMOutputs.Field",
	"magnitude":   "COMOutputs.Magnitude",
	"divergence":  "COMOutputs.Divergence",
	"curl":        "COMOutputs.Curl",
	"icom":        "COMOutputs.ICoM",
	"rotation":    "COMOptions.Rotation",
	"flip_y":      "COMOptions.FlipY",
	"roi_compact": "Outputs.Positions",

	"shifts": "ApplyOptions.Shifts",

	"mask":  "MasksFrom's specs",
	"masks": "MasksFrom's files",
}

// goName returns the Go name of the option key: goNames's, or for the option of a
// registered format Options.FormatOptions["key"].
func goName(key string) (string, bool) {
	if name, ok := goNames[key]; ok {
		return name, true
	}
	if _, _, ok := dataset.FormatOptionOf(key); ok {
		return "Options.FormatOptions[" + strconv.Quote(key) + "]", true
	}
	return "", false
}

// goNameRef matches a Go name (goName) in a message.
var goNameRef = regexp.MustCompile(`\bOptions\.FormatOptions\["[a-z][a-z0-9_]*"\]|\b(?:ApplyOptions|Options|Plan|Outputs|COMOutputs|COMOptions)\.[A-Z][A-Za-z0-9]*\b|\bMasksFrom's (?:specs|files)\b|\bPick's positions\b`)

// goNamesOf rewrites the options named in a message by key ("give option dataset_path")
// as a Go caller sets them ("give Options.DatasetPath"). The errors and warnings of this
// package's functions (Open, OpenWarnings, Plan.Planner, Apply, Masks, Save, ...) are
// rewritten so; ParseOptions and ParsePlan, whose input names options by key, keep the
// keys.
func goNamesOf(msg string) string {
	return optionRef.ReplaceAllStringFunc(msg, func(m string) string {
		if name, ok := goName(m[len("option "):]); ok {
			return name
		}
		return m
	})
}

// optionRef matches "option KEY" in messages; goNamesOf and flagNames rewrite it where
// KEY is an option's key (goNames).
var optionRef = regexp.MustCompile(`\boption ([a-z][a-z0-9_]*)\b`)

// flagNames rewrites the options named in a message, by key or by Go name, as the
// CLI's flags (frontend.FlagNames).
func flagNames(msg string) string {
	return optionRef.ReplaceAllStringFunc(optionKeys(msg), func(m string) string {
		key := m[len("option "):]
		if _, ok := goName(key); ok { // every option key (TestGoNames)
			return frontend.FlagName(key)
		}
		return m
	})
}

// optionKeys rewrites the Go names of options in a message (as goNamesOf writes them)
// as "option KEY" (frontend.OptionKeys).
func optionKeys(msg string) string {
	return goNameRef.ReplaceAllStringFunc(msg, func(m string) string {
		if key, ok := strings.CutPrefix(m, "Options.FormatOptions["); ok {
			return "option " + strings.Trim(key, `"]`)
		}
		for key, name := range goNames {
			if name == m {
				return "option " + key
			}
		}
		return m
	})
}

// goNamed is an error of this package's Go API: its message names the options by their
// Go names (goNamesOf); its chain is err's (the kind, context errors).
type goNamed struct{ err error }

func (e goNamed) Error() string { return goNamesOf(e.err.Error()) }
func (e goNamed) Unwrap() error { return e.err }

// goErr returns err with its options named for a Go caller (nil for nil).
func goErr(err error) error {
	if _, ok := err.(goNamed); ok || err == nil {
		return err
	}
	return goNamed{err}
}

// goErrs replaces *err by goErr(*err), deferred by functions with many returns.
func goErrs(err *error) { *err = goErr(*err) }

// goWarnings rewrites warnings for a Go caller (goNamesOf).
func goWarnings(w []string) []string {
	for i := range w {
		w[i] = goNamesOf(w[i])
	}
	return w
}
