package frontend_test

import (
	"fmt"

	"github.com/stemdot/stemdot/internal/frontend"
)

// Shapes as the CLI, the C ABI and Python give them.
func ExampleParseShape() {
	for _, s := range []string{"256,256", "(2, 4)", "[8]"} {
		shape, err := frontend.ParseShape(s, 0)
		fmt.Println(shape, err)
	}
	_, err := frontend.ParseShape("256", 2)
	fmt.Println(err)
	// Output:
	// [256 256] <nil>
	// [2 4] <nil>
	// [8] <nil>
	// want 2 comma-separated sizes, got 1
}
