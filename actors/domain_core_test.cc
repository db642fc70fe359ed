#include "actors/domain_core.h"
#include <gtest/gtest.h>
