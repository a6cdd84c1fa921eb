package megago_test

import (
	"fmt"

	"megago"
)

// Version is a non-empty string such as "0.1.0-dev".
func ExampleVersion() {
	fmt.Println(megago.Version != "")
	// Output: true
}
