package engine

// The tests open files of every format.
import _ "github.com/stemdot/stemdot/dataset/formats"
