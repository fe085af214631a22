#ifndef LIB_BASE_VERSION_H_
#define LIB_BASE_VERSION_H_

namespace aggregator {

// The release of aggregatord and its tools.
inline constexpr char kVersion[] = "0.1.0";

}  // namespace aggregator

#endif  // LIB_BASE_VERSION_H_
