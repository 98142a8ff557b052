// Backend over a namespace of free functions (flick::ref, flick::cpu).
#pragma once

#include "runtime/op_list.h"

#define FLICK_FORWARD_OP(ns, ret, name, params, args) \
  ret name params override { return ns::name args; }
