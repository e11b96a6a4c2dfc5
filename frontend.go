package stemdot

import (
	"image"

	"github.com/stemdot/stemdot/internal/frontend"
)

// The front ends' plumbing (package internal/frontend) that reads this package's tables
// and checks, set here so that it stays off this package's API.
func init() {
	frontend.FlagNames = flagNames
	frontend.OptionKeys = optionKeys
	frontend.CheckShiftsFile = checkShiftsFile
	frontend.CheckScan2D = func(nav []int, what string) error { return goErr(needs2D(nav, what)) }
	frontend.GreyImage = func(nav []int, values []float64) *image.Gray {
		return grey(nav, len(values), func(f int) float64 { return values[f] })
	}
}
