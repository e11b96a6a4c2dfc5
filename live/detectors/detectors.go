// Package detectors registers every detector stream protocol with package live
// (live.Open): import it for its side effect, as dataset/formats registers the file
// formats.
package detectors

import (
	_ "github.com/stemdot/stemdot/live/dectris" // dectris://
	_ "github.com/stemdot/stemdot/live/merlin"  // merlin://
)
