//go:build !amd64

package cpupeak

func supported() bool  { return false }
func isa() string      { return "" }
func vectorLanes() int { return 0 }
func chain(int)        {}
func throughput(int)   {}
