package main

import "reflect"

var reflectTypeOfItemCount = reflect.TypeOf((*ItemCount)(nil)).Elem()
