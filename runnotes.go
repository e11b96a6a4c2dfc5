package stemdot

import "github.com/stemdot/stemdot/dataset"

// RunWarnings are the warnings of notes, run notes of frames of ds (dataset.RunNotes:
// what its reader counted in the frames it read, such as a DECTRIS detector's saturated
// pixels), one line each: the note's sentence after the file, as OpenWarnings says the
// dataset's notes. Apply, Reduce, Resident.Apply and Pick add those of the frames they
// read to their result's Warnings; Centre and DescanFit, whose results hold no
// warnings, read every frame of ds: after them, the run's are
// RunWarnings(ds, dataset.RunNotes(ds, 0, ds.NumFrames())). A frame counts once in each
// run that reads it: a dataset applied twice gives each run its own notes, not a running
// total.
func RunWarnings(ds dataset.Dataset, notes []dataset.RunNote) []string {
	var w []string
	for _, n := range notes {
		w = append(w, ds.Path()+": "+n.String())
	}
	return w
}

// RunNoteInfo is a run note of a result's frames (Result.RunNotes) in its sidecar: what
// the reader counted (Key, Count, in Frames frames) and the warning that says it.
type RunNoteInfo struct {
	Key     string `json:"key"`
	Count   int64  `json:"count"`
	Frames  int64  `json:"frames"`
	Warning string `json:"warning"`
}

// runNoteInfo is the sidecar's record of notes of frames of ds.
func runNoteInfo(ds dataset.Dataset, notes []dataset.RunNote) []RunNoteInfo {
	var info []RunNoteInfo
	for i, w := range RunWarnings(ds, notes) {
		info = append(info, RunNoteInfo{Key: notes[i].Key, Count: notes[i].Count, Frames: notes[i].Frames, Warning: w})
	}
	return info
}
