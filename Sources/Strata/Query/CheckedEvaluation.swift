import Foundation
import Synchronization

// Foundation's `Predicate.evaluate` computes integer arithmetic with Swift's operators, which stop
// the process on overflow (`$0.count + 1` on `Int.max`), on division by zero (`$0.total /
// $0.parts`) and on a closed range whose bounds are the wrong way round (`$0.low...$0.high`).
// A query must not crash the app over a value stored in the file, so a predicate holding such an
// expression is evaluated here instead: the same expressions, in the same order, with the same
// short-circuits (`$0.parts != 0 && $0.total / $0.parts > 2` never divides by zero), except that
// those operations throw `PredicateEvaluationError`, which the query reports as `invalidQuery`.
//
// Each Foundation expression type conforms where its parts do, so a predicate is checked only
// when every expression in it is one this file knows; any other (a nested predicate, a regex)
// leaves the whole predicate to Foundation, as before. Predicates that cannot trap keep
// Foundation's evaluation too (`mayTrap`).

/// An expression evaluated as Foundation evaluates it, except where Foundation would trap.
protocol CheckedExpression<Output>: PredicateExpression {
    /// Whether evaluating this expression with Foundation could trap: read from the types alone.
    static var mayTrap: Bool { get }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output
}

/// What a checked evaluation throws where Foundation's would stop the process.
struct PredicateEvaluationError: Error, CustomStringConvertible {
    let description: String
}

/// A `#Predicate` of a query, with the checked form of its expression where it needs one.
struct PredicateFilter<M>: Sendable {
    let predicate: Predicate<M>
    private let checked: CheckedBox?

    init(_ predicate: Predicate<M>) {
        self.predicate = predicate
        if expressionMayTrap(predicate.expression), let expression = predicate.expression as? any CheckedExpression<Bool> {
            checked = CheckedBox(expression: expression)
        } else {
            checked = nil
        }
    }

    func evaluate(_ object: M) throws -> Bool {
        guard let checked else { return try predicate.evaluate(object) }
        return try checked.expression.checkedEvaluate(PredicateBindings((predicate.variable, object)))
    }
}

/// Safe to send: the expression is the predicate's own `expression`, a
/// `StandardPredicateExpression` and so `Sendable`, seen through another of its protocols
/// (which cannot require `Sendable` itself: Foundation's expressions are `Sendable` only where
/// their parts are, and a conformance cannot depend on that).
private struct CheckedBox: @unchecked Sendable {
    let expression: any CheckedExpression<Bool>
}

extension CheckedExpression {
    var mayTrap: Bool { Self.mayTrap }
}

extension CheckedExpression where Output == Bool {
    /// This test of one element, bound to `variable` (the closure of `contains(where:)`,
    /// `allSatisfy` and `filter` in a predicate).
    func elementTest<T>(_ variable: PredicateExpressions.Variable<T>, _ bindings: PredicateBindings) -> (T) throws -> Bool {
        var inner = bindings
        return { element in
            inner[variable] = element
            return try self.checkedEvaluate(inner)
        }
    }
}

/// Whether `expression` is one this file evaluates and Foundation's evaluation of it could trap,
/// remembered per expression type: the conformance check of a nested generic expression type
/// costs ~15,000 instructions (every query's `filter` asked it), and an app's predicates are a
/// few types asked again and again.
func expressionMayTrap(_ expression: Any) -> Bool {
    let type = ObjectIdentifier(Swift.type(of: expression))
    if let known = trapsByType.withLock({ $0[type] }) { return known }
    let traps = (expression as? any CheckedExpression)?.mayTrap ?? false
    trapsByType.withLock { $0[type] = traps }
    return traps
}

private let trapsByType = Mutex<[ObjectIdentifier: Bool]>([:])

// MARK: - Where Foundation traps

private enum IntegerOperation: String {
    case add = "+", subtract = "-", multiply = "*", divide = "/", remainder = "%"
}

/// `x op y` for integers, throwing where the operator would trap; nil for other numbers.
private func checkedInteger<T>(_ x: T, _ op: IntegerOperation, _ y: T) throws -> T? {
    guard let integer = x as? any BinaryInteger else { return nil }
    guard let result = try checkedInteger(integer, op, y as Any) as? T else { throw mismatch(x, op, y) }
    return result
}

private func mismatch(_ x: Any, _ op: IntegerOperation, _ y: Any) -> PredicateEvaluationError {
    PredicateEvaluationError(description: "\(x) \(op.rawValue) \(y): operands of different types")
}

private func checkedInteger<I: BinaryInteger>(_ x: I, _ op: IntegerOperation, _ y: Any) throws -> I {
    guard let y = y as? I else { throw mismatch(x, op, y) }
    if (op == .divide || op == .remainder) && y == 0 {
        throw PredicateEvaluationError(description: "division by zero: \(x) \(op.rawValue) 0")
    }
    if let fixed = x as? any FixedWidthInteger {
        guard let result = try checkedFixedWidth(fixed, op, y) as? I else { throw mismatch(x, op, y) }
        return result
    }
    // An integer of unbounded width: only division by zero traps.
    switch op {
    case .add: return x + y
    case .subtract: return x - y
    case .multiply: return x * y
    case .divide: return x / y
    case .remainder: return x % y
    }
}

private func checkedFixedWidth<I: FixedWidthInteger>(_ x: I, _ op: IntegerOperation, _ y: Any) throws -> I {
    guard let y = y as? I else { throw mismatch(x, op, y) }
    let (result, overflow): (I, Bool)
    switch op {
    case .add: (result, overflow) = x.addingReportingOverflow(y)
    case .subtract: (result, overflow) = x.subtractingReportingOverflow(y)
    case .multiply: (result, overflow) = x.multipliedReportingOverflow(by: y)
    case .divide: (result, overflow) = x.dividedReportingOverflow(by: y)
    case .remainder: (result, overflow) = x.remainderReportingOverflow(dividingBy: y)
    }
    if overflow { throw PredicateEvaluationError(description: "integer overflow: \(x) \(op.rawValue) \(y) does not fit in \(I.self)") }
    return result
}

/// Whether `T`'s arithmetic operators can trap.
private func isInteger<T>(_ type: T.Type) -> Bool { type is any BinaryInteger.Type }

extension PredicateExpressions.Arithmetic: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { isInteger(Output.self) || LHS.mayTrap || RHS.mayTrap }

    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        let a = try lhs.checkedEvaluate(bindings)
        let b = try rhs.checkedEvaluate(bindings)
        switch op {
        case .add: return try checkedInteger(a, .add, b) ?? a + b
        case .subtract: return try checkedInteger(a, .subtract, b) ?? a - b
        case .multiply: return try checkedInteger(a, .multiply, b) ?? a * b
        @unknown default: return try evaluate(bindings)
        }
    }
}

extension PredicateExpressions.IntDivision: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { true }

    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        let a = try lhs.checkedEvaluate(bindings)
        let b = try rhs.checkedEvaluate(bindings)
        return try checkedInteger(a, .divide, b as Any)
    }
}

extension PredicateExpressions.IntRemainder: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { true }

    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        let a = try lhs.checkedEvaluate(bindings)
        let b = try rhs.checkedEvaluate(bindings)
        return try checkedInteger(a, .remainder, b as Any)
    }
}

extension PredicateExpressions.UnaryMinus: CheckedExpression where Wrapped: CheckedExpression {
    static var mayTrap: Bool { isInteger(Output.self) || Wrapped.mayTrap }

    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        let value = try wrapped.checkedEvaluate(bindings)
        // -x is 0 - x, and overflows exactly where that does (Int.min; any positive unsigned).
        return try checkedInteger(.zero, .subtract, value) ?? -value
    }
}

extension PredicateExpressions.ClosedRange: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { true }

    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Swift.ClosedRange<LHS.Output> {
        let low = try lower.checkedEvaluate(bindings)
        let high = try upper.checkedEvaluate(bindings)
        guard low <= high else {
            throw PredicateEvaluationError(description: "range \(low)...\(high): the lower bound is above the upper bound")
        }
        return low...high
    }
}

// MARK: - Everything else: Foundation's evaluation, over checked parts

extension PredicateExpressions.Variable: CheckedExpression {
    static var mayTrap: Bool { false }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output { try evaluate(bindings) }
}

extension PredicateExpressions.Value: CheckedExpression {
    static var mayTrap: Bool { false }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output { value }
}

extension PredicateExpressions.NilLiteral: CheckedExpression {
    static var mayTrap: Bool { false }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output { nil }
}

extension PredicateExpressions.KeyPath: CheckedExpression where Root: CheckedExpression {
    static var mayTrap: Bool { Root.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        try root.checkedEvaluate(bindings)[keyPath: keyPath as Swift.KeyPath<Root.Output, Output>]
    }
}

extension PredicateExpressions.Equal: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        let a = try lhs.checkedEvaluate(bindings)
        let b = try rhs.checkedEvaluate(bindings)
        return a == b
    }
}

extension PredicateExpressions.NotEqual: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        let a = try lhs.checkedEvaluate(bindings)
        let b = try rhs.checkedEvaluate(bindings)
        return a != b
    }
}

extension PredicateExpressions.Comparison: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        let a = try lhs.checkedEvaluate(bindings)
        let b = try rhs.checkedEvaluate(bindings)
        switch op {
        case .lessThan: return a < b
        case .lessThanOrEqual: return a <= b
        case .greaterThan: return a > b
        case .greaterThanOrEqual: return a >= b
        @unknown default: return try evaluate(bindings)
        }
    }
}

extension PredicateExpressions.Conjunction: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        try lhs.checkedEvaluate(bindings) && rhs.checkedEvaluate(bindings)
    }
}

extension PredicateExpressions.Disjunction: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        try lhs.checkedEvaluate(bindings) || rhs.checkedEvaluate(bindings)
    }
}

extension PredicateExpressions.Negation: CheckedExpression where Wrapped: CheckedExpression {
    static var mayTrap: Bool { Wrapped.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool { try !wrapped.checkedEvaluate(bindings) }
}

extension PredicateExpressions.FloatDivision: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        let a = try lhs.checkedEvaluate(bindings)
        let b = try rhs.checkedEvaluate(bindings)
        return a / b
    }
}

extension PredicateExpressions.Range: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    // Foundation's throws (lower bound above the upper, or NaN): a window must not stop before an
    // object that throws, nor an index keep it out (found by the review of 2026-12-06).
    static var mayTrap: Bool { true }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Swift.Range<LHS.Output> {
        let low = try lower.checkedEvaluate(bindings)
        let high = try upper.checkedEvaluate(bindings)
        guard low <= high else {
            throw PredicateEvaluationError(description: "range \(low)..<\(high): the lower bound is above the upper bound")
        }
        return low..<high
    }
}

extension PredicateExpressions.RangeExpressionContains: CheckedExpression
where RangeExpression: CheckedExpression, Element: CheckedExpression {
    static var mayTrap: Bool { RangeExpression.mayTrap || Element.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        try range.checkedEvaluate(bindings).contains(try element.checkedEvaluate(bindings))
    }
}

extension PredicateExpressions.CollectionIndexSubscript: CheckedExpression where Wrapped: CheckedExpression, Index: CheckedExpression {
    static var mayTrap: Bool { Wrapped.mayTrap || Index.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        let collection = try wrapped.checkedEvaluate(bindings)
        let position = try index.checkedEvaluate(bindings)
        guard position >= collection.startIndex && position < collection.endIndex else {
            throw PredicateEvaluationError(
                description: "index \(position) is outside the collection's bounds (\(collection.startIndex) ..< \(collection.endIndex))")
        }
        return collection[position]
    }
}

extension PredicateExpressions.CollectionRangeSubscript: CheckedExpression where Wrapped: CheckedExpression, Range: CheckedExpression {
    static var mayTrap: Bool { Wrapped.mayTrap || Range.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        let collection = try wrapped.checkedEvaluate(bindings)
        let bounds = try range.checkedEvaluate(bindings)
        for position in [bounds.lowerBound, bounds.upperBound]
        where position < collection.startIndex || position > collection.endIndex {
            throw PredicateEvaluationError(
                description: "index \(position) is outside the collection's bounds (\(collection.startIndex) ... \(collection.endIndex))")
        }
        return collection[bounds]
    }
}

extension PredicateExpressions.CollectionContainsCollection: CheckedExpression where Base: CheckedExpression, Other: CheckedExpression {
    static var mayTrap: Bool { Base.mayTrap || Other.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        try base.checkedEvaluate(bindings).contains(try other.checkedEvaluate(bindings))
    }
}

extension PredicateExpressions.SequenceContains: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        let a = try sequence.checkedEvaluate(bindings)
        let b = try element.checkedEvaluate(bindings)
        return a.contains(b)
    }
}

extension PredicateExpressions.SequenceContainsWhere: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        try sequence.checkedEvaluate(bindings).contains(where: test.elementTest(variable, bindings))
    }
}

extension PredicateExpressions.SequenceAllSatisfy: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        try sequence.checkedEvaluate(bindings).allSatisfy(test.elementTest(variable, bindings))
    }
}

extension PredicateExpressions.Filter: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        try sequence.checkedEvaluate(bindings).filter(filter.elementTest(variable, bindings))
    }
}

extension PredicateExpressions.SequenceStartsWith: CheckedExpression where Base: CheckedExpression, Prefix: CheckedExpression {
    static var mayTrap: Bool { Base.mayTrap || Prefix.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool {
        try base.checkedEvaluate(bindings).starts(with: try prefix.checkedEvaluate(bindings))
    }
}

extension PredicateExpressions.SequenceMaximum: CheckedExpression where Elements: CheckedExpression {
    static var mayTrap: Bool { Elements.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output { try elements.checkedEvaluate(bindings).max() }
}

extension PredicateExpressions.SequenceMinimum: CheckedExpression where Elements: CheckedExpression {
    static var mayTrap: Bool { Elements.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output { try elements.checkedEvaluate(bindings).min() }
}

extension PredicateExpressions.Conditional: CheckedExpression where Test: CheckedExpression, If: CheckedExpression, Else: CheckedExpression {
    static var mayTrap: Bool { Test.mayTrap || If.mayTrap || Else.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        try test.checkedEvaluate(bindings) ? trueBranch.checkedEvaluate(bindings) : falseBranch.checkedEvaluate(bindings)
    }
}

extension PredicateExpressions.DictionaryKeySubscript: CheckedExpression where Wrapped: CheckedExpression, Key: CheckedExpression {
    static var mayTrap: Bool { Wrapped.mayTrap || Key.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        try wrapped.checkedEvaluate(bindings)[try key.checkedEvaluate(bindings)]
    }
}

extension PredicateExpressions.DictionaryKeyDefaultValueSubscript: CheckedExpression
where Wrapped: CheckedExpression, Key: CheckedExpression, Default: CheckedExpression {
    static var mayTrap: Bool { Wrapped.mayTrap || Key.mayTrap || Default.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        guard let value = try wrapped.checkedEvaluate(bindings)[try key.checkedEvaluate(bindings)] else {
            return try `default`.checkedEvaluate(bindings)
        }
        return value
    }
}

extension PredicateExpressions.OptionalFlatMap: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        var inner = bindings
        return try wrapped.checkedEvaluate(bindings).flatMap { value -> Result? in
            inner[variable] = value
            // The transform gives a `Result` or a `Result?` (the two initializers): either reads
            // as a `Result?`, as Foundation's forced cast reads it.
            guard let result = try transform.checkedEvaluate(inner) as Any as? Result? else {
                throw PredicateEvaluationError(description: "optional chain produced \(RHS.Output.self), not \(Result.self)")
            }
            return result
        }
    }
}

extension PredicateExpressions.NilCoalesce: CheckedExpression where LHS: CheckedExpression, RHS: CheckedExpression {
    static var mayTrap: Bool { LHS.mayTrap || RHS.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        try lhs.checkedEvaluate(bindings) ?? rhs.checkedEvaluate(bindings)
    }
}

extension PredicateExpressions.ForcedUnwrap: CheckedExpression where Inner: CheckedExpression {
    static var mayTrap: Bool { Inner.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Wrapped {
        let input = try inner.checkedEvaluate(bindings)
        guard let result = input else {
            throw PredicateEvaluationError(description: "found nil when unwrapping a value of type \(type(of: input))")
        }
        return result
    }
}

extension PredicateExpressions.ConditionalCast: CheckedExpression where Input: CheckedExpression {
    static var mayTrap: Bool { Input.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output { try input.checkedEvaluate(bindings) as? Desired }
}

extension PredicateExpressions.ForceCast: CheckedExpression where Input: CheckedExpression {
    static var mayTrap: Bool { Input.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Output {
        let value = try input.checkedEvaluate(bindings)
        guard let output = value as? Desired else {
            throw PredicateEvaluationError(description: "failed to cast a value of type \(type(of: value)) to \(Desired.self)")
        }
        return output
    }
}

extension PredicateExpressions.TypeCheck: CheckedExpression where Input: CheckedExpression {
    static var mayTrap: Bool { Input.mayTrap }
    func checkedEvaluate(_ bindings: PredicateBindings) throws -> Bool { try input.checkedEvaluate(bindings) is Desired }
}
