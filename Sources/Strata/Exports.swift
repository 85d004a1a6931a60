// `import Strata` is all a user's file needs, as the README's examples show (DocumentationTests compiles them):
// the engine's types, and Foundation, whose `#Predicate`, `SortDescriptor`, `Data`, `Date`, `UUID`, `Decimal`
// and `URL` are part of Strata's API (queries and field types); and Observation, whose `withObservationTracking`
// and `@Observable` go with `LiveResults` and `LiveObject`. A plain or `public import` would not make them
// visible to the user's file; macros too are found only through what the file imports.
@_exported import StrataStorage
@_exported import Foundation
@_exported import Observation
