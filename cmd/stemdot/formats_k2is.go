package main

import _ "github.com/stemdot/stemdot/dataset/k2is"
