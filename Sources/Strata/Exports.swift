@_exported import StrataStorage
