#include "actors/candidate_builds.h"
#include <gtest/gtest.h>
